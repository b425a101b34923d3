package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// purgeFixture is a database with a project and an endpoint, and makers
// of deliveries created at a given time and finished in a given status.
type purgeFixture struct {
	t   *testing.T
	db  *storage.DB
	s   *storage.Store
	p   webhookd.Project
	now time.Time
}

func newPurgeFixture(t *testing.T) *purgeFixture {
	db := testenv.DB(t)
	s := db.Store()
	_, p, err := s.CreateAPIKey(context.Background(), "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateEndpoint(context.Background(), p.ID, storage.NewEndpoint{URL: "http://127.0.0.1:9/", Secret: "whsec_AAAA"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	return &purgeFixture{t: t, db: db, s: s, p: p, now: time.Now().UTC()}
}

// daysFromToday makes the days begin today: older rows are then outside
// every day, in the default partitions, which are all that Purge reads.
func (f *purgeFixture) daysFromToday() {
	f.t.Helper()
	if err := f.s.StartDaysAt(context.Background(), f.now, f.now, 72*time.Hour); err != nil {
		f.t.Fatal(err)
	}
}

// TestPurgeLeavesTheDaysAlone: a finished delivery past the cutoff in a
// day that was made stays for the day's drop (whole, SPEC §4); Purge
// deletes row by row only outside every day.
func TestPurgeLeavesTheDaysAlone(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	s, p, now, ctx := f.s, f.p, f.now, context.Background()
	old := now.Add(-15 * 24 * time.Hour)
	if err := s.StartDaysAt(ctx, old, now, 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	id := f.mk(old)
	f.finish(id, webhookd.DeliverySucceeded, "")
	got, err := s.Purge(ctx, now.Add(-14*24*time.Hour), now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got != (storage.Purged{}) {
		t.Fatalf("purged %+v from a day: want nothing (the day goes whole)", got)
	}
	if _, err := s.GetDelivery(ctx, p.ID, id); err != nil {
		t.Fatalf("the day's finished delivery: %v, want it kept", err)
	}
}

// mk makes an event created at at with one delivery, and returns the
// delivery's id.
func (f *purgeFixture) mk(at time.Time) string {
	f.t.Helper()
	evs, err := f.s.CreateEvents(context.Background(), f.p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}}, at, func(int) string { return "" })
	if err != nil {
		f.t.Fatal(err)
	}
	return evs[0].Deliveries[0].ID
}

// finish records an attempt that leaves the delivery in status.
func (f *purgeFixture) finish(id, status, reason string) {
	f.t.Helper()
	ctx, now := context.Background(), f.now
	token := storage.NewRequestID()
	ls, err := f.db.ClaimDeliveries(ctx, now, now.Add(time.Minute), []storage.Claim{{DeliveryID: id, Token: token}})
	if err != nil || !ls[0].Held {
		f.t.Fatalf("claim %s: %+v, %v", id, ls, err)
	}
	code := 500
	a := &webhookd.Attempt{Number: 1, RequestID: token, URL: "http://x", Trigger: "auto", StatusCode: &code, StartedAt: now}
	ok, _, err := f.db.RecordAttempts(ctx, []storage.Record{{Lease: &ls[0], Attempt: a,
		Transition: storage.Transition{Status: status, DeadLetterReason: reason, Auto: true, Now: now}}})
	if err != nil || !ok[0] {
		f.t.Fatalf("record %s: %v, %v", id, ok, err)
	}
}

func TestPurgeKeepsWhatIsYoungOrWaiting(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	f.daysFromToday()
	db, s, p, now, mk, finish := f.db, f.s, f.p, f.now, f.mk, f.finish
	ctx := context.Background()
	old := now.Add(-15 * 24 * time.Hour)
	oldDone, oldDead, oldWaiting, young, oldAsked := mk(old), mk(old), mk(old), mk(now), mk(old)
	finish(oldDone, webhookd.DeliverySucceeded, "")
	finish(oldDead, webhookd.DeliveryDeadLetter, webhookd.ReasonExhausted)
	finish(young, webhookd.DeliverySucceeded, "")
	finish(oldAsked, webhookd.DeliveryDeadLetter, webhookd.ReasonExhausted)
	// A redelivery accepted and not yet made keeps its delivery.
	if _, err := s.RequestRedelivery(ctx, p.ID, oldAsked, storage.NewRequestID(), "api"); err != nil {
		t.Fatal(err)
	}

	got, err := s.Purge(ctx, now.Add(-14*24*time.Hour), now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Deliveries != 2 || got.Events != 2 {
		t.Fatalf("purged %+v, want 2 deliveries and their 2 events", got)
	}
	for id, want := range map[string]bool{oldDone: false, oldDead: false, oldWaiting: true, young: true, oldAsked: true} {
		_, err := s.GetDelivery(ctx, p.ID, id)
		if (err == nil) != want {
			t.Errorf("delivery %s kept=%v, want %v", id, err == nil, want)
		}
	}
	var attempts, dead int
	db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM attempts), (SELECT count(*) FROM dead_letters)`).Scan(&attempts, &dead)
	if attempts != 2 || dead != 1 {
		t.Fatalf("%d attempts and %d dead letters left, want 2 and 1", attempts, dead)
	}
}

// TestPurgeInBatches: with a batch of 3, a purge still removes every
// finished delivery and event past the cutoff, passing over older ones
// that wait; dead letters go with their deliveries, through the index on
// dead_letters.event_id.
func TestPurgeInBatches(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	f.daysFromToday()
	ctx := context.Background()
	old := f.now.Add(-15 * 24 * time.Hour)
	for i := range 4 { // the oldest wait: never purged, never in the way
		f.mk(old.Add(time.Duration(i) * time.Second))
	}
	for i := range 8 {
		id := f.mk(old.Add(time.Minute + time.Duration(i)*time.Second))
		if i%2 == 0 {
			f.finish(id, webhookd.DeliveryDeadLetter, webhookd.ReasonExhausted)
		} else {
			f.finish(id, webhookd.DeliverySucceeded, "")
		}
	}
	f.finish(f.mk(f.now), webhookd.DeliverySucceeded, "") // young
	got, err := f.s.Purge(ctx, f.now.Add(-14*24*time.Hour), f.now, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got.Deliveries != 8 || got.Events != 8 {
		t.Fatalf("purged %+v, want 8 deliveries and 8 events", got)
	}
	// The dead letters' webhookd.delivery.dead_lettered events are young:
	// only the events of type a count here.
	var deliveries, events, dead int
	f.db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM deliveries), (SELECT count(*) FROM events WHERE type = 'a'),
		(SELECT count(*) FROM dead_letters)`).Scan(&deliveries, &events, &dead)
	if deliveries != 5 || events != 5 || dead != 0 {
		t.Fatalf("left %d deliveries, %d events, %d dead letters; want 5, 5, 0", deliveries, events, dead)
	}
	var def string
	if err := f.db.Pool().QueryRow(ctx, `SELECT indexdef FROM pg_indexes
		WHERE schemaname = current_schema() AND indexname = 'dead_letters_event_idx'`).Scan(&def); err != nil ||
		!strings.Contains(def, "(event_id)") {
		t.Fatalf("dead_letters_event_idx: %q, %v", def, err)
	}
	// A cancelled purge stops between statements and says so.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.s.Purge(cancelled, f.now, f.now, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled purge: %v", err)
	}
}
