package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/api"
)

// TestRequestTimeout: a request that takes longer than the bound is
// answered 503 timeout with Retry-After and its request id; its work goes
// on and commits, and a repeat with the same Idempotency-Key replays what
// it committed instead of doing it again.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.RequestTimeout = 200 * time.Millisecond })
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	ctx := context.Background()

	// Another transaction holds the events table: an ingest waits for it.
	lock, err := h.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `LOCK TABLE events IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := h.do(req{method: "POST", path: "/v1/events", body: `{"type":"slow","data":{"n":1}}`, idem: "slow-1"})
	took := time.Since(start)
	expectStatus(t, r, http.StatusServiceUnavailable)
	body := r.json(t)["error"].(map[string]any)
	if body["code"] != "timeout" || r.header.Get("Retry-After") == "" || body["request_id"] != r.header.Get("X-Request-Id") ||
		r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("timeout answer: %v %s", r.header, r.body)
	}
	if took > 2*time.Second {
		t.Fatalf("the timeout answer took %s with a 200ms bound", took)
	}
	if n := h.count("events"); n != 0 {
		t.Fatalf("%d events while the table is locked", n)
	}

	// The work was not abandoned: once the table is free it commits.
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.count("events") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the timed-out request's event was not committed within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var eventID string
	if err := h.db.Pool().QueryRow(ctx, `SELECT id FROM events`).Scan(&eventID); err != nil {
		t.Fatal(err)
	}
	// The repeat, as a client makes it: again while it is itself answered
	// 503 timeout (the 200 ms bound, on a loaded machine). Each timeout
	// answer is counted.
	timeouts := 1
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r = h.do(req{method: "POST", path: "/v1/events", body: `{"type":"slow","data":{"n":1}}`, idem: "slow-1"})
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
		if r.json(t)["error"].(map[string]any)["code"] == "timeout" {
			timeouts++
		}
	}
	expectStatus(t, r, http.StatusAccepted)
	if r.header.Get("Idempotent-Replayed") != "true" || r.json(t)["id"] != eventID {
		t.Fatalf("repeat: %v %s; want the committed event %s replayed", r.header, r.body, eventID)
	}
	if n := h.count("events"); n != 1 {
		t.Fatalf("%d events after the repeat, want 1", n)
	}
	if n := metricValue(t, h.registry, "webhookd_api_timeouts_total"); n != float64(timeouts) {
		t.Fatalf("webhookd_api_timeouts_total %v, want %d (the 503 timeout answers given)", n, timeouts)
	}
	// A quick request is answered as before, its headers whole.
	r = h.do(req{method: "GET", path: "/v1/events/" + eventID})
	expectStatus(t, r, http.StatusOK)
	if r.header.Get("X-RateLimit-Limit") == "" || r.header.Get("X-Request-Id") == "" {
		t.Fatalf("quick answer headers %v", r.header)
	}
}

// blockingEnqueuer holds every Enqueue until released.
type blockingEnqueuer struct {
	webhookd.Enqueuer // nil: only Enqueue is called
	called            chan struct{}
	release           chan struct{}
}

func (b *blockingEnqueuer) Enqueue(ctx context.Context, _ ...webhookd.ScheduledDelivery) error {
	b.called <- struct{}{}
	<-b.release
	return nil
}

// TestAnswerDoesNotWaitForTheQueue: an accepted event is answered once it
// commits; handing its deliveries to the queue happens after the answer
// has reached the client (the request bound's buffer lets it through).
func TestAnswerDoesNotWaitForTheQueue(t *testing.T) {
	t.Parallel()
	q := &blockingEnqueuer{called: make(chan struct{}, 1), release: make(chan struct{})}
	h := newHarness(t, func(c *api.Config) { c.Enqueuer = q })
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	r := h.do(req{method: "POST", path: "/v1/events", body: `{"type":"a","data":1}`, idem: "k"})
	expectStatus(t, r, http.StatusAccepted)
	select {
	case <-q.called: // the enqueue began, and is still held
	case <-time.After(10 * time.Second):
		t.Fatal("the deliveries were never enqueued")
	}
	close(q.release)
}
