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

func TestPurgeKeepsWhatIsYoungOrWaiting(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	s := db.Store()
	_, p, err := s.CreateAPIKey(ctx, "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: "http://127.0.0.1:9/", Secret: "whsec_AAAA"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	old := now.Add(-15 * 24 * time.Hour)
	mk := func(at time.Time) string {
		evs, err := s.CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}}, at, func(int) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].Deliveries[0].ID
	}
	finish := func(id, status, reason string) {
		l, err := db.LockDelivery(ctx, id, true)
		if err != nil {
			t.Fatal(err)
		}
		code := 500
		a := &webhookd.Attempt{Number: 1, RequestID: storage.NewRequestID(), URL: "http://x", Trigger: "auto", StatusCode: &code, StartedAt: now}
		if err := l.Finish(ctx, a, storage.Transition{Status: status, DeadLetterReason: reason, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	oldDone, oldDead, oldWaiting, young := mk(old), mk(old), mk(old), mk(now)
	finish(oldDone, webhookd.DeliverySucceeded, "")
	finish(oldDead, webhookd.DeliveryDeadLetter, webhookd.ReasonExhausted)
	finish(young, webhookd.DeliverySucceeded, "")

	got, err := s.Purge(ctx, now.Add(-14*24*time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Deliveries != 2 || got.Events != 2 {
		t.Fatalf("purged %+v, want 2 deliveries and their 2 events", got)
	}
	for id, want := range map[string]bool{oldDone: false, oldDead: false, oldWaiting: true, young: true} {
		_, err := s.GetDelivery(ctx, p.ID, id)
		if (err == nil) != want {
			t.Errorf("delivery %s kept=%v, want %v", id, err == nil, want)
		}
	}
	var attempts, dead int
	db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM attempts), (SELECT count(*) FROM dead_letters)`).Scan(&attempts, &dead)
	if attempts != 1 || dead != 0 {
		t.Fatalf("%d attempts and %d dead letters left, want 1 and 0", attempts, dead)
	}
}
