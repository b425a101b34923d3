package storage_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// A delivery woken for a freed slot that loses the slot to a newer one and
// is held again keeps its place: the next wake takes it, not the
// deliveries held after it (the tail of a held backlog grew with every
// such race when a hold went behind every other). A delivery's place is
// the time it was due.
func TestHeldDeliveryWokenAndHeldAgainKeepsItsPlace(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	_, newDelivery := oneEndpoint(t, db)
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	ids := []string{newDelivery(t0), newDelivery(t0.Add(time.Second)), newDelivery(t0.Add(2 * time.Second))}
	var ep string
	if err := db.Pool().QueryRow(ctx, `SELECT endpoint_id FROM deliveries WHERE id = $1`, ids[0]).Scan(&ep); err != nil {
		t.Fatal(err)
	}
	hold := func(id string, at time.Time) {
		t.Helper()
		until := at.Add(storage.HoldFor)
		if err := db.HoldBack(ctx, at, []storage.Hold{{DeliveryID: id, Reason: webhookd.WaitingEndpointBusy, Until: &until}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids { // each held as it is made, a second apart: their places are the times they were due
		hold(id, t0.Add(time.Duration(i)*time.Second+time.Millisecond))
	}
	wake := func(at time.Time) []string {
		t.Helper()
		woke, err := db.WakeWaiting(ctx, ep, 1, at)
		if err != nil {
			t.Fatal(err)
		}
		return woke
	}
	now := t0.Add(10 * time.Second)
	if woke := wake(now); !slices.Equal(woke, ids[:1]) {
		t.Fatalf("first wake: %v, want the first held %v", woke, ids[:1])
	}
	var next time.Time
	if err := db.Pool().QueryRow(ctx, `SELECT next_attempt_at FROM deliveries WHERE id = $1`, ids[0]).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if next.After(now) {
		t.Fatalf("woken delivery's next_attempt_at %v is after the wake %v: not due", next, now)
	}
	hold(ids[0], now.Add(time.Second)) // no room after all: held again
	if woke := wake(now.Add(2 * time.Second)); !slices.Equal(woke, ids[:1]) {
		t.Fatalf("wake after the second hold: %v, want %v again (it was held first)", woke, ids[:1])
	}
	hold(ids[0], now.Add(3*time.Second))
	if err := db.Pool().QueryRow(ctx, `SELECT next_attempt_at FROM deliveries WHERE id = $1`, ids[0]).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(storage.HoldFor); !next.Equal(want) {
		t.Fatalf("held again: next_attempt_at %v, want its first hold's %v", next, want)
	}
	// One due long ago waits at least half of HoldFor when held.
	late := now.Add(2 * storage.HoldFor)
	if woke := wake(late); !slices.Equal(woke, ids[:1]) {
		t.Fatalf("wake: %v", woke)
	}
	hold(ids[0], late)
	if err := db.Pool().QueryRow(ctx, `SELECT next_attempt_at FROM deliveries WHERE id = $1`, ids[0]).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if min := late.Add(storage.HoldFor / 2); next.Before(min) {
		t.Fatalf("held long after its place: next_attempt_at %v, want at least %v", next, min)
	}
}

// TestReleaseLeasesTogether: the leases of attempts that made no request,
// given up in one call. Each applies only where its token still holds the
// lease; with a reason, a delivery still waiting for an automatic attempt
// waits for it, keeping its place (keepPlace); without one (a manual
// attempt), or once the delivery ended, its schedule stays as it was. A
// wait for an open circuit applies while the circuit is open, until the
// time asked; one whose circuit closed meanwhile is due now, and its false
// says so.
func TestReleaseLeasesTogether(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	project, newDelivery := oneEndpoint(t, db)
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	busy, manual, ended, stolen, closed, open := newDelivery(t0), newDelivery(t0), newDelivery(t0), newDelivery(t0),
		newDelivery(t0), newDelivery(t0)
	broken, err := db.Store().CreateEndpoint(ctx, project, storage.NewEndpoint{URL: "http://127.0.0.1:9/broken",
		Secret: "whsec_AAAA"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool().Exec(ctx, `UPDATE deliveries SET endpoint_id = $2 WHERE id = $1`, open, broken.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool().Exec(ctx, `UPDATE deliveries SET lease_owner = 'tok', lease_until = now() + interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool().Exec(ctx, `UPDATE deliveries SET status = 'succeeded', next_attempt_at = NULL WHERE id = $1`, ended); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool().Exec(ctx, `UPDATE endpoints SET circuit = 'open', probe_at = now() + interval '1 minute'
		WHERE id = $1`, broken.ID); err != nil {
		t.Fatal(err)
	}
	type row struct {
		owner, reason *string
		next          *time.Time
	}
	state := func(id string) (r row) {
		t.Helper()
		if err := db.Pool().QueryRow(ctx, `SELECT lease_owner, waiting_reason, next_attempt_at FROM deliveries WHERE id = $1`,
			id).Scan(&r.owner, &r.reason, &r.next); err != nil {
			t.Fatal(err)
		}
		return r
	}
	until := t0.Add(time.Second).Add(storage.HoldFor)
	probe := t0.Add(time.Minute)
	waits, err := db.ReleaseLeases(ctx, []storage.Release{
		{DeliveryID: busy, Token: "tok", Reason: webhookd.WaitingEndpointBusy, At: until},
		{DeliveryID: manual, Token: "tok", At: until},
		{DeliveryID: ended, Token: "tok", Reason: webhookd.WaitingEndpointBusy, At: until},
		{DeliveryID: stolen, Token: "another", Reason: webhookd.WaitingEndpointBusy, At: until},
		{DeliveryID: closed, Token: "tok", Reason: webhookd.WaitingCircuitOpen, At: probe},
		{DeliveryID: open, Token: "tok", Reason: webhookd.WaitingCircuitOpen, At: probe},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, true, true, false, true}; !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v (false only for the circuit that is closed)", waits, want)
	}
	if r := state(busy); r.owner != nil || r.reason == nil || *r.reason != webhookd.WaitingEndpointBusy ||
		r.next == nil || !r.next.Equal(t0.Add(storage.HoldFor)) {
		t.Fatalf("held for room: lease %v, waiting %v until %v; want released, endpoint_busy until %v (its place)",
			r.owner, r.reason, r.next, t0.Add(storage.HoldFor))
	}
	if r := state(manual); r.owner != nil || r.reason != nil || r.next == nil || !r.next.Equal(t0) {
		t.Fatalf("a manual attempt's release: lease %v, waiting %v until %v; want released and due at %v as before",
			r.owner, r.reason, r.next, t0)
	}
	if r := state(ended); r.owner != nil || r.reason != nil || r.next != nil {
		t.Fatalf("an ended delivery's release: lease %v, waiting %v until %v; want released and nothing else", r.owner, r.reason, r.next)
	}
	if r := state(stolen); r.owner == nil || *r.owner != "tok" || r.reason != nil {
		t.Fatalf("another token's release: lease %v, waiting %v; want the lease kept", r.owner, r.reason)
	}
	if r := state(closed); r.owner != nil || r.reason != nil || r.next == nil || r.next.After(time.Now()) {
		t.Fatalf("a closed circuit's wait: lease %v, waiting %v until %v; want released and due now", r.owner, r.reason, r.next)
	}
	if r := state(open); r.owner != nil || r.reason == nil || *r.reason != webhookd.WaitingCircuitOpen ||
		r.next == nil || !r.next.Equal(probe) {
		t.Fatalf("an open circuit's wait: lease %v, waiting %v until %v; want released, circuit_open until %v",
			r.owner, r.reason, r.next, probe)
	}
}
