package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
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

// TestIdempotencyInProgress: a repeat of a request still running (here, in
// another process, holding its key) waits for it once, for the configured
// wait in all, then answers 409 with Retry-After: 5; once the first has
// committed, a repeat replays it.
func TestIdempotencyInProgress(t *testing.T) {
	t.Parallel()
	const wait = time.Second
	h := newHarness(t, func(c *api.Config) { c.IdempotencyWait = wait })
	project := h.projectOf(h.key)
	k := storage.IdempotencyKey{ProjectID: project, Key: "slow", TTL: time.Hour,
		Fingerprint: sha256.Sum256([]byte("POST /v1/events\n" + eventBody))}
	claimed, finish, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	// A failed check must still let the first request end: it holds a
	// pooled connection, and the harness's cleanup waits for the pool.
	release := sync.OnceFunc(func() { close(finish) })
	t.Cleanup(release)
	go func() {
		_, _, err := h.db.WithIdempotency(context.Background(), k, time.Now(), time.Second,
			func(*storage.Store) (storage.StoredResponse, error) {
				close(claimed)
				<-finish
				return storage.StoredResponse{StatusCode: 202, ContentType: "application/json", Body: []byte(`{"first":true}`)}, nil
			})
		done <- err
	}()
	<-claimed
	start := time.Now()
	r := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "slow"})
	took := time.Since(start)
	expectStatus(t, r, http.StatusConflict)
	if got := r.errorCode(t); got != "idempotency_key_in_progress" {
		t.Fatalf("code %q", got)
	}
	if ra := r.header.Get("Retry-After"); ra != "5" {
		t.Fatalf("Retry-After %q, want 5", ra)
	}
	if took < wait || took > wait*3/2 { // the wait once, not once per step
		t.Fatalf("answered after %v, want %v", took, wait)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	again := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "slow"})
	if again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != `{"first":true}` {
		t.Fatalf("after the first finished, the repeat got %d %s", again.status, again.body)
	}
	if n := h.count("events"); n != 0 {
		t.Fatalf("%d events written by the repeats", n)
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

// TestEventRequestAnswers: an accepted event is replayed byte for byte, a
// 4xx (an unknown endpoint, a body that does not parse) is remembered, a
// used key with another body is a mismatch, and a batch is answered in
// order.
func TestEventRequestAnswers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	first := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "a"})
	expectStatus(t, first, http.StatusAccepted)
	again := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "a"})
	if again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.body, again.body) {
		t.Fatalf("replay: %v %s", again.header, again.body)
	}
	for _, bad := range []string{`{"type":"a","data":1,"endpoint_ids":["ep_NOPE"]}`, `{"type":"a"}`, `{`} {
		r := h.do(req{method: "POST", path: "/v1/events", body: bad, idem: "bad" + bad})
		expectStatus(t, r, http.StatusBadRequest)
		if r2 := h.do(req{method: "POST", path: "/v1/events", body: bad, idem: "bad" + bad}); r2.header.Get("Idempotent-Replayed") != "true" ||
			!bytes.Equal(r.body, r2.body) {
			t.Fatalf("%s: 4xx not remembered: %v %s", bad, r2.header, r2.body)
		}
	}
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events", body: `{"type":"b","data":2}`, idem: "a"}), http.StatusUnprocessableEntity)
	batch := `{"events":[{"type":"a","data":1},{"type":"b","data":2}]}`
	r := h.do(req{method: "POST", path: "/v1/events/batch", body: batch, idem: "batch"})
	expectStatus(t, r, http.StatusAccepted)
	if n := len(r.json(t)["data"].([]any)); n != 2 {
		t.Fatalf("batch answered %d events", n)
	}
	if e, d := h.count("events"), h.count("deliveries"); e != 3 || d != 3 {
		t.Fatalf("%d events and %d deliveries, want 3 and 3", e, d)
	}
}
