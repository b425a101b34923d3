package api_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/storage"
)

const eventBody = `{"type":"order.created","data":{"id":42,"total":"9.99"}}`

func TestIdempotencyKeyRequired(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, path := range []string{"/v1/events", "/v1/events/batch", "/v1/endpoints"} {
		r := h.do(req{method: "POST", path: path, body: eventBody})
		expectStatus(t, r, http.StatusBadRequest)
		if got := r.errorCode(t); got != "idempotency_key_required" {
			t.Errorf("%s: code %q, want idempotency_key_required", path, got)
		}
	}
	if n := h.count("events"); n != 0 {
		t.Fatalf("%d events written without a key", n)
	}
}

func TestIdempotencyKeyTooLong(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: strings.Repeat("k", 256)})
	expectStatus(t, r, http.StatusBadRequest)
	if got := r.errorCode(t); got != "idempotency_key_too_long" {
		t.Fatalf("code %q, want idempotency_key_too_long", got)
	}
	if n := h.count("events"); n != 0 {
		t.Fatalf("%d events written with a too-long key", n)
	}
	r = h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: strings.Repeat("k", 255)})
	expectStatus(t, r, http.StatusAccepted)
}

func TestIdempotentReplayIsByteForByte(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	first := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "replay-1"})
	expectStatus(t, first, http.StatusAccepted)
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("first response is marked as replayed")
	}
	second := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "replay-1"})
	expectStatus(t, second, http.StatusAccepted)
	if second.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("repeat lacks Idempotent-Replayed: true (headers %v)", second.header)
	}
	if !bytes.Equal(first.body, second.body) {
		t.Fatalf("replayed body differs:\n%s\n%s", first.body, second.body)
	}
	if first.header.Get("X-Request-Id") == second.header.Get("X-Request-Id") {
		t.Fatal("the repeat reused the first X-Request-Id")
	}
	if n := h.count("events"); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	if n := h.count("deliveries"); n != 1 {
		t.Fatalf("%d deliveries, want 1", n)
	}
}

func TestIdempotencyKeyMismatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "mm"}), http.StatusAccepted)
	other := `{"type":"order.created","data":{"id":43}}`
	r := h.do(req{method: "POST", path: "/v1/events", body: other, idem: "mm"})
	expectStatus(t, r, http.StatusUnprocessableEntity)
	if got := r.errorCode(t); got != "idempotency_key_mismatch" {
		t.Fatalf("code %q", got)
	}
	// The same body on another path is another request too.
	r = h.do(req{method: "POST", path: "/v1/endpoints", body: eventBody, idem: "mm"})
	expectStatus(t, r, http.StatusUnprocessableEntity)
	if n := h.count("events"); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

func TestIdempotencyRemembers4xx(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	bad := `{"type":"bad type!","data":{}}`
	first := h.do(req{method: "POST", path: "/v1/events", body: bad, idem: "4xx"})
	expectStatus(t, first, http.StatusBadRequest)
	second := h.do(req{method: "POST", path: "/v1/events", body: bad, idem: "4xx"})
	expectStatus(t, second, http.StatusBadRequest)
	if second.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.body, second.body) {
		t.Fatalf("4xx not replayed: %v %s", second.header, second.body)
	}
	// Fixing the body under the same key is a different request.
	r := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "4xx"})
	expectStatus(t, r, http.StatusUnprocessableEntity)

	// A 409 is remembered, and the work of the failed request is undone.
	ext := `{"type":"a","data":1,"external_id":"x-1"}`
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events", body: ext, idem: "ext-a"}), http.StatusAccepted)
	conflict := h.do(req{method: "POST", path: "/v1/events", body: ext, idem: "ext-b"})
	expectStatus(t, conflict, http.StatusConflict)
	again := h.do(req{method: "POST", path: "/v1/events", body: ext, idem: "ext-b"})
	if again.status != http.StatusConflict || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("409 not replayed: %d %v", again.status, again.header)
	}
	if n := h.count("events"); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

func TestIdempotencyForgets429(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey("tiny", storage.ProjectPlan{RateLimitPerMinute: 1})
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "first", key: key}), http.StatusAccepted)
	r := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "k429", key: key})
	// A plan change reaches the API when its key's cache entry expires.
	h.srv = h.newServer(func(c *api.Config) { c.KeyCacheTTL = time.Nanosecond })
	expectStatus(t, r, http.StatusTooManyRequests)
	// Lift the plan; the key was not spent by the 429.
	h.newKey("tiny", storage.ProjectPlan{RateLimitPerMinute: 100000})
	r = h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "k429", key: key})
	expectStatus(t, r, http.StatusAccepted)
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("a request after a 429 was answered from a record")
	}
}

func TestIdempotencyForgets5xx(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	ctx := context.Background()
	// Break ingest for real: the deliveries table goes away for a moment.
	if _, err := h.db.Pool().Exec(ctx, "ALTER TABLE deliveries RENAME TO deliveries_away"); err != nil {
		t.Fatal(err)
	}
	r := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "k5xx"})
	expectStatus(t, r, http.StatusInternalServerError)
	if got := r.errorCode(t); got != "internal" {
		t.Fatalf("code %q, want internal", got)
	}
	if _, err := h.db.Pool().Exec(ctx, "ALTER TABLE deliveries_away RENAME TO deliveries"); err != nil {
		t.Fatal(err)
	}
	if n := h.count("idempotency_records"); n != 1 { // the endpoint's record only
		t.Fatalf("%d idempotency records after a 500, want 1", n)
	}
	r = h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "k5xx"})
	expectStatus(t, r, http.StatusAccepted)
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("the repeat after a 500 was answered from a record")
	}
	if n := h.count("events"); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

func TestIdempotencyConcurrentRepeats(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	const n = 10
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		out   = make([]response, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			out[i] = h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "same"})
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i, r := range out {
		expectStatus(t, r, http.StatusAccepted)
		if !bytes.Equal(r.body, out[0].body) {
			t.Fatalf("response %d differs:\n%s\n%s", i, r.body, out[0].body)
		}
		if r.header.Get("Idempotent-Replayed") != "true" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d responses unmarked, want exactly 1 (the first)", fresh)
	}
	if c := h.count("events"); c != 1 {
		t.Fatalf("%d events, want 1", c)
	}
}

func TestIdempotencyInProgress(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.IdempotencyWait = 300 * time.Millisecond })
	ctx := context.Background()
	// Insert, uncommitted, an event with the external_id the first request
	// uses: its own insert then waits for this transaction, after it
	// claimed the key.
	tx, err := h.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO events (id, project_id, type, data, external_id, created_at)
		SELECT 'evt_HELD', project_id, 'a', '1', 'held', now() FROM api_keys WHERE prefix = $1`, h.key[:8]); err != nil {
		t.Fatal(err)
	}
	const eventBody = `{"type":"a","data":1,"external_id":"held"}`
	first := make(chan response, 1)
	go func() { first <- h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "slow"}) }()
	waitFor(t, func() bool { return pgWaiting(t, h) >= 1 }) // the first holds the key and waits on the lock

	r := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "slow"})
	expectStatus(t, r, http.StatusConflict)
	if got := r.errorCode(t); got != "idempotency_key_in_progress" {
		t.Fatalf("code %q", got)
	}
	if ra := r.header.Get("Retry-After"); ra != "5" {
		t.Fatalf("Retry-After %q, want 5", ra)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	f := <-first
	expectStatus(t, f, http.StatusAccepted)
	again := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "slow"})
	if again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, f.body) {
		t.Fatalf("after the first finished, the repeat got %d %s", again.status, again.body)
	}
}

func TestIdempotencyScopeIsPerProject(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	other := h.newKey("other", storage.ProjectPlan{})
	a := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "shared"})
	b := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "shared", key: other})
	expectStatus(t, a, http.StatusAccepted)
	expectStatus(t, b, http.StatusAccepted)
	if b.header.Get("Idempotent-Replayed") != "" || a.json(t)["id"] == b.json(t)["id"] {
		t.Fatal("another project's key was answered from this project's record")
	}
	if n := h.count("events"); n != 2 {
		t.Fatalf("%d events, want 2", n)
	}
}

func TestIdempotencyRecordExpires(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey("short", storage.ProjectPlan{IdempotencyTTL: time.Hour})
	first := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "ttl", key: key})
	expectStatus(t, first, http.StatusAccepted)
	h.clock.Advance(59 * time.Minute)
	r := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "ttl", key: key})
	if r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("record gone before its TTL")
	}
	h.clock.Advance(2 * time.Minute)
	r = h.do(req{method: "POST", path: "/v1/events", body: `{"type":"t","data":2}`, idem: "ttl", key: key})
	expectStatus(t, r, http.StatusAccepted)
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("an expired record was replayed")
	}
	// Expired records are purged.
	h.clock.Advance(2 * time.Hour)
	n, err := h.db.Store().PurgeIdempotencyRecords(context.Background(), h.clock.Now())
	if err != nil || n != 1 {
		t.Fatalf("purged %d (%v), want 1", n, err)
	}
}

func TestIdempotencyRecordSurvivesRedisFlush(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	first := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "durable"})
	expectStatus(t, first, http.StatusAccepted)
	if err := h.redis.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	r := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "durable"})
	if r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, first.body) {
		t.Fatalf("after FLUSHDB the repeat was not replayed: %s", r.body)
	}
	if n := h.count("events"); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pgWaiting counts backends of this schema's pool waiting on a lock.
func pgWaiting(t *testing.T, h *harness) int {
	var n int
	err := h.db.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO events%'
			AND application_name = current_setting('application_name')`).Scan(&n) // this test's schema only
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEventRequestsAloneOrGrouped: with event requests committed in groups
// (the default) and each alone (IngestGroups -1), the same requests get
// the same answers: an accepted event replayed byte for byte, a remembered
// 4xx, a mismatch, and a batch.
func TestEventRequestsAloneOrGrouped(t *testing.T) {
	t.Parallel()
	for _, groups := range []int{0, -1} {
		t.Run(fmt.Sprintf("groups=%d", groups), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *api.Config) { c.IngestGroups = groups })
			h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
			first := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "a"})
			expectStatus(t, first, http.StatusAccepted)
			again := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "a"})
			if again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.body, again.body) {
				t.Fatalf("replay: %v %s", again.header, again.body)
			}
			bad := `{"type":"a","data":1,"endpoint_ids":["ep_NOPE"]}`
			r := h.do(req{method: "POST", path: "/v1/events", body: bad, idem: "bad"})
			expectStatus(t, r, http.StatusBadRequest)
			if r = h.do(req{method: "POST", path: "/v1/events", body: bad, idem: "bad"}); r.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("4xx not remembered: %v", r.header)
			}
			expectStatus(t, h.do(req{method: "POST", path: "/v1/events", body: bad, idem: "a"}), http.StatusUnprocessableEntity)
			batch := `{"events":[{"type":"a","data":1},{"type":"b","data":2}]}`
			r = h.do(req{method: "POST", path: "/v1/events/batch", body: batch, idem: "batch"})
			expectStatus(t, r, http.StatusAccepted)
			if n := len(r.json(t)["data"].([]any)); n != 2 {
				t.Fatalf("batch answered %d events", n)
			}
			if e, d := h.count("events"), h.count("deliveries"); e != 3 || d != 3 {
				t.Fatalf("%d events and %d deliveries, want 3 and 3", e, d)
			}
		})
	}
}
