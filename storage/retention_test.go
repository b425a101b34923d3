package storage_test

import (
	"context"
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
	projectID, mk := oneEndpoint(t, db)
	now := time.Now().UTC()
	old := now.Add(-15 * 24 * time.Hour)
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
	if _, err := s.RequestRedelivery(ctx, projectID, oldAsked, storage.NewRequestID(), "api"); err != nil {
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
		_, err := s.GetDelivery(ctx, projectID, id)
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
