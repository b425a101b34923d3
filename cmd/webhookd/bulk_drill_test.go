package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestBulkJobKilledMidwayResumesWithNoLineTwice kills a worker process
// with SIGKILL while it runs a bulk job of 30,000 lines: a second worker
// takes the job over once the dead one's task and lease run out (asynq's
// recoverer hands the task back after about a minute), resumes
// after the cursor of the last committed chunk, and every line becomes
// exactly one event.
func TestBulkJobKilledMidwayResumesWithNoLineTwice(t *testing.T) {
	t.Parallel()
	db, p, dbURL := drillDB(t)
	_, redisURL := testenv.Redis(t)
	ctx := context.Background()
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(rc.Close)
	if _, err := db.Store().CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: rc.URL, Secret: "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ="}, time.Now()); err != nil {
		t.Fatal(err)
	}
	const chunks, per = 30, 1000
	up := db.NewBulkUpload(p.ID, time.Now())
	for c := range chunks {
		var body []byte
		for i := 1; i <= per; i++ {
			body = fmt.Appendf(body, `{"type":"bulk.item","data":{"n":%d}}`+"\n", c*per+i)
		}
		if err := up.AddChunk(ctx, c*per+1, per, body); err != nil {
			t.Fatal(err)
		}
	}
	var jobID string
	_, _, err := up.Commit(ctx, storage.IdempotencyKey{ProjectID: p.ID, Key: "drill", TTL: time.Hour}, chunks*per, time.Second,
		func(id string) (storage.StoredResponse, error) {
			jobID = id
			return storage.StoredResponse{StatusCode: http.StatusAccepted, ContentType: "application/json", Body: []byte(`{}`)}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	job := func() webhookd.Job {
		j, err := db.Store().GetJob(ctx, p.ID, jobID)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}

	first, exited := startWorker(t, dbURL, redisURL) // its reconciler enqueues the queued job
	waitFor(t, 60*time.Second, "the first worker's first chunks", func() bool { return job().Done >= 2*per })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	j := job()
	if j.Status != webhookd.JobRunning || j.Done%per != 0 || j.Done >= chunks*per {
		t.Fatalf("after the kill: %+v; want it running, its progress a whole number of chunks", j)
	}
	t.Logf("killed at %d of %d lines", j.Done, j.Total)

	startWorker(t, dbURL, redisURL)
	waitFor(t, 4*time.Minute, "the job's end on the second worker", func() bool { return job().Status == webhookd.JobSucceeded })
	if j := job(); j.Done != chunks*per || j.FailedCount != 0 {
		t.Fatalf("finished job %+v", j)
	}
	var events, distinct, low, high int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*), count(DISTINCT (data->>'n')::int), min((data->>'n')::int),
		max((data->>'n')::int) FROM events`).Scan(&events, &distinct, &low, &high); err != nil {
		t.Fatal(err)
	}
	if events != chunks*per || distinct != events || low != 1 || high != chunks*per {
		t.Fatalf("%d events, %d distinct lines, from %d to %d; want each of %d lines once", events, distinct, low, high, chunks*per)
	}
}
