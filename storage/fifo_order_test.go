package storage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// fifoProject makes a project with an ordered endpoint and returns their
// ids.
func fifoProject(t *testing.T, db *storage.DB) (project, fifo string) {
	t.Helper()
	project = newProject(t, db)
	ep, err := db.Store().CreateEndpoint(context.Background(), project, storage.NewEndpoint{URL: "http://127.0.0.1:9/",
		Secret: "whsec_AAAA", Ordering: webhookd.OrderingFIFO}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return project, ep.ID
}

// blockedBy returns the backend blocked by backend pid, or 0. A backend
// that waits for pid's transaction only to end (virtualxid: another
// test's migration building an index concurrently waits so for every
// transaction open) is not one.
func blockedBy(t *testing.T, db *storage.DB, pid int32) int32 {
	t.Helper()
	var blocked int32
	err := db.Pool().QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
		WHERE $1 = ANY (pg_blocking_pids(pid)) AND wait_event IS DISTINCT FROM 'virtualxid'`, pid).Scan(&blocked)
	if err != nil {
		t.Fatal(err)
	}
	return blocked
}

// TestFIFONumbersCommitInOrder: two event requests for one ordered
// endpoint, through the real ingest path. A is held up before its commit
// (another transaction inserts its external id and has not committed);
// B, accepted after, must wait for A: else B's number commits first, is
// the visible head of the queue and is claimed, and A's joins it in
// flight once A commits.
func TestFIFONumbersCommitInOrder(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	project, fifo := fifoProject(t, db)

	hold, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	var holder int32
	if err := hold.QueryRow(ctx, `WITH e AS (INSERT INTO events (id, project_id, type, data, external_id, created_at)
			VALUES ('evt_hold', $1, 'a', '1', 'x', now()))
		INSERT INTO event_external_ids VALUES ($1, 'x', 'evt_hold') RETURNING pg_backend_pid()`, project).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	type created struct {
		evs []webhookd.Event
		err error
	}
	create := func(ext *string) chan created {
		done := make(chan created, 1)
		go func() {
			evs, err := db.Store().CreateEvents(ctx, project, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1"),
				ExternalID: ext, EndpointIDs: []string{fifo}}}, time.Now(), func(int) string { return "" })
			done <- created{evs, err}
		}()
		return done
	}
	x := "x"
	aDone := create(&x)
	var a int32
	within(t, 5*time.Second, func() bool { a = blockedBy(t, db, holder); return a != 0 })
	bDone := create(nil)
	var b *created
	within(t, 5*time.Second, func() bool {
		select {
		case c := <-bDone:
			b = &c
			return true
		default:
			return blockedBy(t, db, a) != 0
		}
	})
	if b != nil {
		t.Errorf("B ended (%v) while A, accepted before it, was still open", b.err)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	ra := <-aDone
	if b == nil {
		c := <-bDone
		b = &c
	}
	if ra.err != nil || b.err != nil {
		t.Fatalf("A: %v; B: %v", ra.err, b.err)
	}
	var seqA, seqB int64
	if err := db.Pool().QueryRow(ctx, `SELECT (SELECT fifo_seq FROM deliveries WHERE event_id = $1),
		(SELECT fifo_seq FROM deliveries WHERE event_id = $2)`, ra.evs[0].ID, b.evs[0].ID).Scan(&seqA, &seqB); err != nil {
		t.Fatal(err)
	}
	if seqA >= seqB {
		t.Errorf("A's number %d is not below B's %d", seqA, seqB)
	}
}

// TestTestEventTakesNoFIFOPlace: a test event to an ordered endpoint is
// made at once (SPEC): its delivery has no place in the queue, so it
// neither waits behind the head nor holds up the events after it.
func TestTestEventTakesNoFIFOPlace(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	project, fifo := fifoProject(t, db)
	create := func(trigger string) string {
		t.Helper()
		evs, err := db.Store().CreateEvents(ctx, project, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1"),
			EndpointIDs: []string{fifo}, Trigger: trigger}}, time.Now(), func(int) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].Deliveries[0].ID
	}
	test := create(webhookd.TriggerTest) // waiting, never claimed
	auto := create("")
	var testSeq, autoSeq *int64
	if err := db.Pool().QueryRow(ctx, `SELECT (SELECT fifo_seq FROM deliveries WHERE id = $1),
		(SELECT fifo_seq FROM deliveries WHERE id = $2)`, test, auto).Scan(&testSeq, &autoSeq); err != nil {
		t.Fatal(err)
	}
	if testSeq != nil {
		t.Fatalf("the test event's delivery has fifo_seq %d, want none", *testSeq)
	}
	if autoSeq == nil {
		t.Fatal("the next event's delivery has no fifo_seq")
	}
	now := time.Now().Add(time.Second)
	ls, err := db.ClaimDeliveries(ctx, now, now.Add(time.Minute), []storage.Claim{{DeliveryID: auto,
		Token: storage.NewRequestID(), Mode: storage.ClaimAuto}})
	if err != nil {
		t.Fatal(err)
	}
	if !ls[0].Held || ls[0].Behind {
		t.Errorf("the event after a waiting test event: held %v, behind %v; want it the queue's head", ls[0].Held, ls[0].Behind)
	}
}

// TestHoldBehindInOrderedQueueWaitsForTurn: a delivery behind others in an
// ordered queue that an attempt holds back for room waits for its turn, at
// the time it had: held for an hour instead, it would be a head that
// FIFOHeads never offers once those ahead are done, and the queue would
// stall until some worker's freed slot woke it. The head itself is held
// for room like any delivery.
func TestHoldBehindInOrderedQueueWaitsForTurn(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	project, fifo := fifoProject(t, db)
	var ids []string
	for range 2 {
		evs, err := db.Store().CreateEvents(ctx, project, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1"),
			EndpointIDs: []string{fifo}}}, time.Now(), func(int) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, evs[0].Deliveries[0].ID)
	}
	now := time.Now().Add(time.Second)
	until := now.Add(storage.HoldFor)
	if err := db.HoldBack(ctx, now, []storage.Hold{{DeliveryID: ids[0], Reason: webhookd.WaitingEndpointBusy, Until: &until},
		{DeliveryID: ids[1], Reason: webhookd.WaitingEndpointBusy, Until: &until}}); err != nil {
		t.Fatal(err)
	}
	state := func(id string) (reason string, next time.Time) {
		t.Helper()
		if err := db.Pool().QueryRow(ctx, `SELECT coalesce(waiting_reason, ''), next_attempt_at FROM deliveries WHERE id = $1`,
			id).Scan(&reason, &next); err != nil {
			t.Fatal(err)
		}
		return reason, next
	}
	if reason, next := state(ids[0]); reason != webhookd.WaitingEndpointBusy || next.Before(now.Add(storage.HoldFor/2)) {
		t.Fatalf("the head held for room: %q until %v, want endpoint_busy about an hour ahead", reason, next)
	}
	if reason, next := state(ids[1]); reason != webhookd.WaitingFIFOTurn || next.After(now) {
		t.Fatalf("the second held for room: %q until %v, want fifo_turn and still due", reason, next)
	}
	if _, err := db.Pool().Exec(ctx, `UPDATE deliveries SET status = 'succeeded', next_attempt_at = NULL, waiting_reason = NULL WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	heads, err := db.FIFOHeads(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(heads) != 1 || heads[0].ID != ids[1] {
		t.Fatalf("heads offered once the first is done: %v, want %s", heads, ids[1])
	}
}
