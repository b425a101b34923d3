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
		token := storage.NewRequestID()
		ls, err := db.ClaimDeliveries(ctx, now, now.Add(time.Minute), []storage.Claim{{DeliveryID: id, Token: token}})
		if err != nil || !ls[0].Held {
			t.Fatalf("claim %s: %+v, %v", id, ls, err)
		}
		code := 500
		a := &webhookd.Attempt{Number: 1, RequestID: token, URL: "http://x", Trigger: "auto", StatusCode: &code, StartedAt: now}
		ok, err := db.RecordAttempts(ctx, []storage.Record{{Lease: &ls[0], Attempt: a,
			Transition: storage.Transition{Status: status, DeadLetterReason: reason, Auto: true, Now: now}}})
		if err != nil || !ok[0] {
			t.Fatalf("record %s: %v, %v", id, ok, err)
		}
	}
	oldDone, oldDead, oldWaiting, young, oldAsked := mk(old), mk(old), mk(old), mk(now), mk(old)
	finish(oldDone, webhookd.DeliverySucceeded, "")
	finish(oldDead, webhookd.DeliveryDeadLetter, webhookd.ReasonExhausted)
	finish(young, webhookd.DeliverySucceeded, "")
	finish(oldAsked, webhookd.DeliveryDeadLetter, webhookd.ReasonExhausted)
	// A redelivery accepted and not yet made keeps its delivery.
	if _, err := s.RequestRedelivery(ctx, p.ID, oldAsked, storage.NewRequestID(), "api"); err != nil {
		t.Fatal(err)
	}

	got, err := s.Purge(ctx, now.Add(-14*24*time.Hour), now)
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
