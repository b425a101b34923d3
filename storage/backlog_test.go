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

// TestReadBacklog: the oldest due delivery of each waiting status, leased
// ones left out, read through deliveries_due_idx; and the jobs still to
// run.
func TestReadBacklog(t *testing.T) {
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
	now := time.Now().UTC().Truncate(time.Microsecond)
	b, err := s.ReadBacklog(ctx, now)
	if err != nil || len(b.OldestDue) != 0 || len(b.Jobs) != 0 || b.JobsRemaining != 0 {
		t.Fatalf("empty database: %+v, %v", b, err)
	}
	mk := func(at time.Time) string {
		evs, err := s.CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}}, at, func(int) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].Deliveries[0].ID
	}
	leased, oldest := mk(now.Add(-10*time.Minute)), mk(now.Add(-5*time.Minute))
	mk(now.Add(-time.Minute))
	mk(now.Add(time.Minute)) // not due yet
	if ls, err := db.ClaimDeliveries(ctx, now, now.Add(time.Minute), []storage.Claim{{DeliveryID: leased, Token: storage.NewRequestID()}}); err != nil || !ls[0].Held {
		t.Fatalf("claim: %+v, %v", ls, err)
	}
	if _, err := s.CreateJob(ctx, p.ID, storage.DeadLetterFilter{}, now); err != nil {
		t.Fatal(err)
	}
	b, err = s.ReadBacklog(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.OldestDue[webhookd.DeliveryPending]; !got.Equal(now.Add(-5 * time.Minute)) {
		t.Errorf("oldest due pending %v, want %v (%s; the leased one left out)", got, now.Add(-5*time.Minute), oldest)
	}
	if _, ok := b.OldestDue[webhookd.DeliveryRetrying]; ok {
		t.Errorf("a retrying delivery is due: %+v", b)
	}
	if b.Jobs["queued"] != 1 {
		t.Errorf("jobs %+v, want one queued", b.Jobs)
	}
	// A bulk job counts beside the replay, its lines as items to do
	// (webhookd_jobs, webhookd_job_items_remaining).
	up := db.NewBulkUpload(p.ID, now)
	if err := up.AddChunk(ctx, 1, 3, []byte("{}\n{}\n{}\n")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := up.Commit(ctx, storage.IdempotencyKey{ProjectID: p.ID, Key: "bulk-1", TTL: time.Hour}, 3, time.Second,
		func(id string) (storage.StoredResponse, error) {
			return storage.StoredResponse{StatusCode: 202, ContentType: "application/json", Body: []byte(`{"job_id":"` + id + `"}`)}, nil
		}); err != nil {
		t.Fatal(err)
	}
	if b, err = s.ReadBacklog(ctx, now); err != nil || b.Jobs["queued"] != 2 || b.JobsRemaining != 3 {
		t.Errorf("with a bulk job of 3 lines: jobs %+v, remaining %d (%v); want 2 queued, 3 remaining", b.Jobs, b.JobsRemaining, err)
	}
}
