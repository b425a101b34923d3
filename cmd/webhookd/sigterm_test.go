package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/wire"
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

	rc := newHoldingReceiver(t, hold)
	if _, err := db.Store().CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: rc.url, Secret: "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ="}, time.Now()); err != nil {
		t.Fatal(err)
	}
	deliveryOf := enqueueEvents(t, db, p, rdb, events, 10*time.Second)

	// Once all of the first worker's slots hold a request open, it gets
	// SIGTERM.
	first, exited := startWorker(t, dbURL, redisURL,
		"WEBHOOKD_WORKER_CONCURRENCY="+strconv.Itoa(concurrency), "WEBHOOKD_RESPONSE_TIMEOUT=10s")
	deadline := time.Now().Add(15 * time.Second)
	for {
		rc.mu.Lock()
		n := rc.open
		rc.mu.Unlock()
		if n == concurrency {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver holds %d requests open after 15s; want %d", n, concurrency)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rc.mu.Lock() // no request starts between the snapshot and the signal
	inFlight := append([]heldRequest(nil), rc.started...)
	err := first.Process.Signal(syscall.SIGTERM)
	rc.mu.Unlock()
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

	rc.mu.Lock()
	if len(rc.started) != len(inFlight) {
		t.Errorf("the worker sent %d requests after SIGTERM; want none (no new work)", len(rc.started)-len(inFlight))
	}
	for _, r := range inFlight {
		if !rc.answered[r.requestID] {
			t.Errorf("request %s (event %s) in flight at SIGTERM was not waited for: the receiver could not answer it", r.requestID, r.eventID)
		}
	}
	rc.mu.Unlock()
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
	rc.mu.Lock()
	defer rc.mu.Unlock()
	seen := map[string]int{}
	for _, r := range rc.started {
		seen[r.eventID]++
	}
	twice := 0
	for _, n := range seen {
		if n > 1 {
			twice++
		}
	}
	t.Logf("%d of %d events received twice (%d requests in all)", twice, events, len(rc.started))
}

// holdingReceiver is a delivery receiver that takes hold to answer each
// request and remembers which requests it started and which it answered in
// full (204 sent and flushed).
type holdingReceiver struct {
	url string

	mu       sync.Mutex
	started  []heldRequest
	open     int
	answered map[string]bool // by request id
}

// heldRequest is one delivery request: its event and request ids.
type heldRequest struct{ eventID, requestID string }

func newHoldingReceiver(t *testing.T, hold time.Duration) *holdingReceiver {
	h := &holdingReceiver{answered: map[string]bool{}}
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := heldRequest{r.Header.Get("webhook-id"), r.Header.Get("X-Request-Id")}
		h.mu.Lock()
		h.started = append(h.started, req)
		h.open++
		h.mu.Unlock()
		defer func() { h.mu.Lock(); h.open--; h.mu.Unlock() }()
		timer := time.NewTimer(hold)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.Context().Done():
			return // the worker gave up on the request
		}
		w.WriteHeader(http.StatusNoContent)
		if http.NewResponseController(w).Flush() == nil {
			h.mu.Lock()
			h.answered[req.requestID] = true
			h.mu.Unlock()
		}
	}))
	t.Cleanup(rc.Close)
	h.url = rc.URL
	return h
}

// enqueueEvents makes n events of type "a" in project p and enqueues their
// deliveries as the API does after its commit, with the task timeout of a
// worker whose response timeout is responseTimeout. It returns each event's
// one delivery by event id.
func enqueueEvents(t *testing.T, db *storage.DB, p webhookd.Project, rdb redis.UniversalClient, n int, responseTimeout time.Duration) map[string]string {
	t.Helper()
	ctx := context.Background()
	batch := make([]storage.NewEvent, n)
	for i := range batch {
		batch[i] = storage.NewEvent{Type: "a", Data: json.RawMessage(strconv.Itoa(i))}
	}
	evs, err := db.Store().CreateEvents(ctx, p.ID, batch, time.Now(), func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	deliveryOf := map[string]string{}
	var due []webhookd.ScheduledDelivery
	for _, ev := range evs {
		d := ev.Deliveries[0]
		deliveryOf[ev.ID] = d.ID
		due = append(due, webhookd.ScheduledDelivery{ID: d.ID, EndpointID: d.EndpointID, DueAt: time.Now()})
	}
	wcfg := dispatcher.Config{HTTP: wire.HTTPConfig{ResponseTimeout: responseTimeout}}.WithDefaults()
	if err := dispatcher.NewQueue(rdb, wcfg.Queue, wcfg.TaskTimeout()).Enqueue(ctx, due...); err != nil {
		t.Fatal(err)
	}
	return deliveryOf
}

// stallRequest sends the API at addr a POST /v1/events of a type no
// endpoint takes and, once its handler reads the body (it answers the
// request's Expect: 100-continue), half of the body. The listener then has
// a request in flight until finish sends the rest and returns the status of
// the answer (0 if the connection was closed without one). read waits for
// what the connection says next.
func stallRequest(t *testing.T, addr, key string) (read func() (string, error), finish func() int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(40 * time.Second))
	body := `{"type":"not.subscribed","data":{}}`
	if _, err := fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Idempotency-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n",
		addr, key, uuid.NewString(), len(body)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("the API did not start reading the request: %v %v", resp, err)
	}
	if _, err := io.WriteString(conn, body[:len(body)/2]); err != nil {
		t.Fatal(err)
	}
	read = func() (string, error) {
		b, err := br.ReadString('\n')
		return b, err
	}
	return read, func() int {
		if _, err := io.WriteString(conn, body[len(body)/2:]); err != nil {
			return 0
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
}

// TestSIGTERMInAllStopsTheWorkerWithTheListeners sends SIGTERM to `webhookd
// all` while its API is still receiving a request (half of the body sent)
// and a slow receiver holds every worker slot, with more deliveries queued.
// SPEC §1: the worker stops taking tasks at the moment the listeners stop
// accepting, so while the request drains no attempt starts, though slots
// free up; the attempts in flight finish and are recorded, the request is
// answered, and the process exits 0.
func TestSIGTERMInAllStopsTheWorkerWithTheListeners(t *testing.T) {
	t.Parallel()
	const (
		events      = 6
		concurrency = 2 // below events: most deliveries are still queued at SIGTERM
		hold        = time.Second
	)
	db, p, dbURL := drillDB(t)
	rdb, redisURL := testenv.Redis(t)
	ctx := context.Background()
	key, _, err := db.Store().CreateAPIKey(ctx, "drill", storage.ProjectPlan{}) // a key of project p
	if err != nil {
		t.Fatal(err)
	}
	rc := newHoldingReceiver(t, hold)
	if _, err := db.Store().CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: rc.url, EventTypes: []string{"a"},
		Secret: "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ="}, time.Now()); err != nil {
		t.Fatal(err)
	}
	deliveryOf := enqueueEvents(t, db, p, rdb, events, 10*time.Second)

	apiAddr := "127.0.0.1:" + freePort(t)
	all := startProcess(t, "all", dbURL, redisURL, "WEBHOOKD_API_ADDR="+apiAddr,
		"WEBHOOKD_WORKER_CONCURRENCY="+strconv.Itoa(concurrency), "WEBHOOKD_RESPONSE_TIMEOUT=10s")
	pid := all.cmd.Process.Pid
	waitFor(t, 20*time.Second, "webhookd all listening on "+apiAddr, func() bool {
		c, err := net.Dial("tcp", apiAddr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	_, finish := stallRequest(t, apiAddr, key)
	// asynq lists a running worker in Redis, and takes it off once its
	// Shutdown is over: the attempts it ran have returned.
	inspector := asynq.NewInspectorFromRedisClient(rdb)
	workerListed := func() bool {
		servers, err := inspector.Servers()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range servers {
			if s.PID == pid {
				return true
			}
		}
		return false
	}
	waitFor(t, 15*time.Second, fmt.Sprintf("every one of the %d worker slots holding a request open", concurrency), func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return rc.open == concurrency && workerListed()
	})
	rc.mu.Lock() // no request starts between the snapshot and the signal
	inFlight := append([]heldRequest(nil), rc.started...)
	err = all.cmd.Process.Signal(syscall.SIGTERM)
	rc.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()

	// Until the worker is done, with the request still draining: no new
	// attempt, and no new connection taken.
	deadline := signalled.Add(20 * time.Second)
	for {
		rc.mu.Lock()
		late := len(rc.started) - len(inFlight)
		rc.mu.Unlock()
		if late > 0 {
			t.Fatalf("%d attempts started %v after SIGTERM, while the API was draining a request: the worker kept taking tasks",
				late, time.Since(signalled).Round(time.Millisecond))
		}
		c, dialErr := net.Dial("tcp", apiAddr)
		if dialErr == nil {
			c.Close()
		}
		if dialErr != nil && !workerListed() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after SIGTERM: the API accepts connections: %v; the worker still runs: %v", dialErr == nil, workerListed())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the worker stopped %v after SIGTERM, the request still in flight", time.Since(signalled).Round(time.Millisecond))
	if status := finish(); status != http.StatusAccepted {
		t.Errorf("the request in flight at SIGTERM got %d; want 202 (the listener drains it)", status)
	}
	select {
	case <-all.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("webhookd all still runs %v after SIGTERM", time.Since(signalled).Round(time.Millisecond))
	}
	if code := all.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("webhookd all exited with %v after SIGTERM; want status 0", all.cmd.ProcessState)
	}

	checkShutdownComplete(t, all.logs.String(), []any{"api", "ops"}, 0, true)

	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.started) != len(inFlight) {
		t.Errorf("the worker sent %d requests after SIGTERM; want none", len(rc.started)-len(inFlight))
	}
	for _, r := range inFlight {
		if !rc.answered[r.requestID] {
			t.Errorf("request %s in flight at SIGTERM was not waited for", r.requestID)
		}
		d, err := db.Store().GetDelivery(ctx, p.ID, deliveryOf[r.eventID])
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != webhookd.DeliverySucceeded {
			t.Errorf("delivery %s, in flight at SIGTERM: %s; want its 204 recorded", d.ID, d.Status)
		}
	}
}

// TestSIGTERMDrainBoundCutsAndExitsZero sends SIGTERM to `webhookd serve`
// while a request hangs half sent. SPEC §1: a process exits 0 on SIGTERM.
// Once the drain bound (WEBHOOKD_DRAIN_TIMEOUT) has passed, the listener
// closes the connection without an answer, the log says what was cut, and
// the process still exits 0.
func TestSIGTERMDrainBoundCutsAndExitsZero(t *testing.T) {
	t.Parallel()
	db, _, dbURL := drillDB(t)
	_, redisURL := testenv.Redis(t)
	key, _, err := db.Store().CreateAPIKey(context.Background(), "drill", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + freePort(t)
	serve := startProcess(t, "serve", dbURL, redisURL, "WEBHOOKD_API_ADDR="+addr, "WEBHOOKD_DRAIN_TIMEOUT=1s")
	waitFor(t, 20*time.Second, "webhookd serve listening on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	read, _ := stallRequest(t, addr, key)
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()

	if got, err := read(); got != "" || !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the hanging request, after SIGTERM: read %q, %v; want its connection closed without an answer", got, err)
	}
	select {
	case <-serve.exited:
	case <-time.After(40 * time.Second):
		t.Fatalf("webhookd serve still runs %v after SIGTERM", time.Since(signalled).Round(time.Millisecond))
	}
	took := time.Since(signalled)
	t.Logf("webhookd serve exited %v after SIGTERM: %v", took.Round(time.Millisecond), serve.cmd.ProcessState)
	if code := serve.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("webhookd serve exited with %v after its drain bound passed; want status 0", serve.cmd.ProcessState)
	}
	if took > 15*time.Second {
		t.Errorf("webhookd serve took %v to stop with a drain bound of 1s", took.Round(time.Millisecond))
	}
	if logs := serve.logs.String(); !strings.Contains(logs, `"listener":"api"`) || !strings.Contains(logs, `"requests_cut":1`) {
		t.Errorf("the log does not say that the API listener cut 1 request:\n%s", logs)
	}
	checkShutdownComplete(t, serve.logs.String(), []any{"api", "ops"}, 1, false)
}

// checkShutdownComplete checks that the last line of a process's JSON log
// says its shutdown is complete, which listeners it drained, how many
// requests it cut and whether it waited for a worker's attempts: what tells
// a clean stop from a crash.
func checkShutdownComplete(t *testing.T, logs string, listeners []any, cut int, worker bool) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last["msg"] != "shutdown complete" {
		t.Errorf("the last log line is %q (%v); want \"shutdown complete\"", lines[len(lines)-1], err)
		return
	}
	if got, _ := last["listeners_drained"].([]any); fmt.Sprint(got) != fmt.Sprint(listeners) ||
		last["requests_cut"] != float64(cut) || last["worker_drained"] != worker {
		t.Errorf("shutdown complete: %v; want listeners_drained %v, requests_cut %d, worker_drained %v", last, listeners, cut, worker)
	}
	if _, ok := last["took_ms"].(float64); !ok {
		t.Errorf("shutdown complete: took_ms %v", last["took_ms"])
	}
}
