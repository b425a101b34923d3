package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestDeadWorkersLeasesAreVoided: the leases of a worker that stopped
// beating for storage.WorkerStale are void at once (another claim takes
// the delivery), while a live worker's stay held; the dead worker's record
// still needs its own token, so once another attempt holds the delivery
// it is refused.
func TestDeadWorkersLeasesAreVoided(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	_, mk := oneEndpoint(t, db)
	now := time.Now().UTC()
	dead, live := storage.NewWorkerID(), storage.NewWorkerID()
	for _, w := range []string{dead, live} {
		if err := db.Beat(ctx, w, map[string]storage.EndpointLoad{"ep_x": {Limit: 7, InFlight: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	deadClaim := storage.Claim{DeliveryID: mk(now), Token: storage.NewRequestID(), Worker: dead}
	liveClaim := storage.Claim{DeliveryID: mk(now), Token: storage.NewRequestID(), Worker: live}
	ls, err := db.ClaimDeliveries(ctx, now, now.Add(2*time.Minute), []storage.Claim{deadClaim, liveClaim})
	if err != nil || !ls[0].Held || !ls[1].Held {
		t.Fatalf("claims: %+v, %v", ls, err)
	}
	loads, err := db.Store().EndpointLoads(ctx, []string{"ep_x"})
	if err != nil || loads["ep_x"] != (storage.EndpointLoad{Limit: 14, InFlight: 4}) {
		t.Fatalf("loads summed over the live workers: %+v, %v", loads, err)
	}

	if v, n, err := db.VoidDeadLeases(ctx); err != nil || len(v) != 0 || n != 0 {
		t.Fatalf("with every worker beating: voided %+v of %d dead, %v", v, n, err)
	}
	if _, err := db.Pool().Exec(ctx, `UPDATE workers SET beat_at = now() - interval '6 seconds' WHERE id = $1`, dead); err != nil {
		t.Fatal(err)
	}
	v, n, err := db.VoidDeadLeases(ctx)
	if err != nil || len(v) != 1 || v[0].DeliveryID != deadClaim.DeliveryID || n != 1 {
		t.Fatalf("voided %+v of %d dead, %v; want the dead worker's one lease", v, n, err)
	}
	if v, _, err := db.VoidDeadLeases(ctx); err != nil || len(v) != 0 {
		t.Fatalf("voided again: %+v, %v; a dead worker is voided once", v, err)
	}
	var workers int
	db.Pool().QueryRow(ctx, `SELECT count(*) FROM workers`).Scan(&workers)
	if workers != 1 {
		t.Fatalf("%d workers left, want the live one", workers)
	}

	next := storage.Claim{DeliveryID: deadClaim.DeliveryID, Token: storage.NewRequestID(), Worker: live}
	again, err := db.ClaimDeliveries(ctx, now, now.Add(2*time.Minute),
		[]storage.Claim{next, {DeliveryID: liveClaim.DeliveryID, Token: storage.NewRequestID(), Worker: live}})
	if err != nil || !again[0].Held || again[1].Held {
		t.Fatalf("claims after the void: %+v, %v; want the dead worker's delivery taken and the live one's refused", again, err)
	}
	stale := ls[0]
	applied, _, err := db.RecordAttempts(ctx, []storage.Record{{Lease: &stale, Transition: storage.Transition{
		Status: webhookd.DeliverySucceeded, Now: now}}})
	if err != nil || applied[0] {
		t.Fatalf("the dead worker's record: applied %v, %v; want refused", applied, err)
	}
}

// TestDeadWorkersProbeIsFreed: an open circuit's probe taken by a worker
// found dead is freed with its leases (the next attempt may probe at
// once), where a live worker's probe stays taken.
func TestDeadWorkersProbeIsFreed(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	project, _ := oneEndpoint(t, db)
	var ep string
	if err := db.Pool().QueryRow(ctx, `SELECT id FROM endpoints WHERE project_id = $1`, project).Scan(&ep); err != nil {
		t.Fatal(err)
	}
	dead, live := storage.NewWorkerID(), storage.NewWorkerID()
	for _, w := range []string{dead, live} {
		if err := db.Beat(ctx, w, nil); err != nil {
			t.Fatal(err)
		}
	}
	open := func() {
		t.Helper()
		if _, err := db.Pool().Exec(ctx, `UPDATE endpoints SET circuit = 'open', probe_at = now() - interval '1 second',
			probe_worker = NULL WHERE id = $1`, ep); err != nil {
			t.Fatal(err)
		}
	}
	take := func(w string) bool {
		t.Helper()
		now := time.Now()
		took, err := db.TakeProbe(ctx, ep, now, now.Add(time.Hour), w)
		if err != nil {
			t.Fatal(err)
		}
		return took
	}
	open()
	if !take(live) || take(dead) {
		t.Fatal("the live worker's probe was not taken, or taken twice")
	}
	if _, err := db.Pool().Exec(ctx, `UPDATE workers SET beat_at = now() - interval '6 seconds' WHERE id = $1`, dead); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.VoidDeadLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if take(dead) {
		t.Fatal("a live worker's probe was freed when another worker died")
	}

	open()
	if err := db.Beat(ctx, dead, nil); err != nil { // alive again, as a new beat
		t.Fatal(err)
	}
	if !take(dead) || take(live) {
		t.Fatal("the probe was not taken once")
	}
	if _, err := db.Pool().Exec(ctx, `UPDATE workers SET beat_at = now() - interval '6 seconds' WHERE id = $1`, dead); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.VoidDeadLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if !take(live) {
		t.Fatal("the dead worker's probe was not freed: the endpoint waits for its time to run out")
	}
}

// TestBeatWithThePoolExhausted: a worker beats while every connection of
// the shared pool is taken (a stall elsewhere in the process), so its live
// leases are not voided; a beat held up in PostgreSQL gives up within its
// timeout, and the next one lands.
func TestBeatWithThePoolExhausted(t *testing.T) {
	t.Parallel()
	db := poolOfOne(t, t.Context()) // setup is not what the deadline bounds
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := db.Pool().Acquire(ctx) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	w := storage.NewWorkerID()
	beatCtx, beatCancel := context.WithTimeout(ctx, 3*time.Second)
	defer beatCancel()
	if err := db.Beat(beatCtx, w, nil); err != nil {
		t.Fatalf("beat with the pool exhausted: %v", err)
	}

	hold, err := conn.Begin(ctx) // holds the worker's row: the next beat waits in PostgreSQL
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT FROM workers WHERE id = $1 FOR UPDATE`, w); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := db.Beat(ctx, w, nil); err == nil || ctx.Err() != nil || time.Since(start) > storage.WorkerStale {
		t.Fatalf("a held-up beat returned %v after %v; want it to give up before the worker is stale", err, time.Since(start))
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Beat(ctx, w, nil); err != nil {
		t.Fatalf("the beat after one that gave up: %v", err)
	}
}
