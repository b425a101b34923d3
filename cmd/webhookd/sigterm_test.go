package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestSIGTERMFinishesInFlightAttempts sends SIGTERM to a worker process
// while a slow receiver holds every one of its attempts open. SPEC §1: the
// worker takes no new work, lets the attempts finish, records them and
// exits 0; a second worker then delivers everything still queued.
func TestSIGTERMFinishesInFlightAttempts(t *testing.T) {
	t.Parallel()
	const (
		events      = 20
		concurrency = 4 // below events: most deliveries are still queued at SIGTERM
		hold        = 2 * time.Second
	)
	db, p, dbURL := drillDB(t)
	rdb, redisURL := testenv.Redis(t)
	ctx := context.Background()

	// The receiver takes hold to answer each request and remembers which
	// ones it answered in full (204 sent and flushed).
	type request struct{ eventID, requestID string }
	var (
		mu       sync.Mutex
		started  []request
		open     int
		answered = map[string]bool{} // by request id
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := request{r.Header.Get("webhook-id"), r.Header.Get("X-Request-Id")}
		mu.Lock()
		started = append(started, req)
		open++
		mu.Unlock()
		defer func() { mu.Lock(); open--; mu.Unlock() }()
		timer := time.NewTimer(hold)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.Context().Done():
			return // the worker gave up on the request
		}
		w.WriteHeader(http.StatusNoContent)
		if http.NewResponseController(w).Flush() == nil {
			mu.Lock()
			answered[req.requestID] = true
			mu.Unlock()
		}
	}))
	t.Cleanup(rc.Close)
	if _, err := db.Store().CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: rc.URL, Secret: "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ="}, time.Now()); err != nil {
		t.Fatal(err)
	}
	batch := make([]storage.NewEvent, events)
	for i := range batch {
		batch[i] = storage.NewEvent{Type: "a", Data: json.RawMessage(strconv.Itoa(i))}
	}
	evs, err := db.Store().CreateEvents(ctx, p.ID, batch, time.Now(), func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	// Enqueued as the API does after its commit, with the worker's task
	// timeout.
	deliveryOf := map[string]string{} // event id → its one delivery
	var due []webhookd.ScheduledDelivery
	for _, ev := range evs {
		d := ev.Deliveries[0]
		deliveryOf[ev.ID] = d.ID
		due = append(due, webhookd.ScheduledDelivery{ID: d.ID, EndpointID: d.EndpointID, DueAt: time.Now()})
	}
	wcfg := dispatcher.Config{HTTP: dispatcher.HTTPConfig{ResponseTimeout: 10 * time.Second}}.WithDefaults()
	if err := dispatcher.NewQueue(rdb, wcfg.Queue, wcfg.TaskTimeout()).Enqueue(ctx, due...); err != nil {
		t.Fatal(err)
	}

	// Once all of the first worker's slots hold a request open, it gets
	// SIGTERM.
	first, exited := startWorker(t, dbURL, redisURL,
		"WEBHOOKD_WORKER_CONCURRENCY="+strconv.Itoa(concurrency), "WEBHOOKD_RESPONSE_TIMEOUT=10s")
	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		n := open
		mu.Unlock()
		if n == concurrency {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver holds %d requests open after 15s; want %d", n, concurrency)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock() // no request starts between the snapshot and the signal
	inFlight := append([]request(nil), started...)
	err = first.Process.Signal(syscall.SIGTERM)
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	select {
	case <-exited:
	case <-time.After(hold + 18*time.Second):
		t.Fatalf("the worker still runs %v after SIGTERM", time.Since(signalled).Round(time.Millisecond))
	}
	t.Logf("the worker exited %v after SIGTERM with %d attempts in flight: %v",
		time.Since(signalled).Round(time.Millisecond), len(inFlight), first.ProcessState)
	if first.ProcessState.ExitCode() != 0 {
		t.Errorf("the worker exited with %v after SIGTERM; want status 0", first.ProcessState)
	}

	mu.Lock()
	if len(started) != len(inFlight) {
		t.Errorf("the worker sent %d requests after SIGTERM; want none (no new work)", len(started)-len(inFlight))
	}
	for _, r := range inFlight {
		if !answered[r.requestID] {
			t.Errorf("request %s (event %s) in flight at SIGTERM was not waited for: the receiver could not answer it", r.requestID, r.eventID)
		}
	}
	mu.Unlock()
	for _, r := range inFlight {
		d, err := db.Store().GetDelivery(ctx, p.ID, deliveryOf[r.eventID])
		if err != nil {
			t.Fatal(err)
		}
		recorded := false
		for _, a := range d.Attempts {
			recorded = recorded || a.RequestID == r.requestID && a.StatusCode != nil && *a.StatusCode == http.StatusNoContent
		}
		if !recorded || d.Status != webhookd.DeliverySucceeded {
			t.Errorf("delivery %s, in flight at SIGTERM as request %s: status %s, attempts %+v; want succeeded with that 204 recorded",
				d.ID, r.requestID, d.Status, d.Attempts)
		}
	}

	// Nothing accepted is lost: a second worker delivers the rest.
	startWorker(t, dbURL, redisURL)
	pending := map[string]bool{}
	for _, id := range deliveryOf {
		pending[id] = true
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		for id := range pending {
			d, err := db.Store().GetDelivery(ctx, p.ID, id)
			if err != nil {
				t.Fatal(err)
			}
			if d.Status == webhookd.DeliverySucceeded {
				delete(pending, id)
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries not succeeded 20s after the second worker started", len(pending), events)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]int{}
	for _, r := range started {
		seen[r.eventID]++
	}
	twice := 0
	for _, n := range seen {
		if n > 1 {
			twice++
		}
	}
	t.Logf("%d of %d events received twice (%d requests in all)", twice, events, len(started))
}
