package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// harness is an API server on a real PostgreSQL schema and Redis database.
type harness struct {
	t        testing.TB
	db       *storage.DB
	redis    *redis.Client
	clock    *clock
	logs     *syncBuffer
	registry *prometheus.Registry
	srv      *httptest.Server
	key      string // an API key of project "main"
	apis     map[*httptest.Server]*api.Server
}

type option func(*api.Config)

func newHarness(t testing.TB, opts ...option) *harness {
	t.Helper()
	db := testenv.DB(t)
	rdb, _ := testenv.Redis(t)
	h := &harness{t: t, db: db, redis: rdb, clock: &clock{t: time.Now().UTC()}, logs: &syncBuffer{},
		registry: prometheus.NewRegistry()}
	h.srv = h.newServer(opts...)
	h.key = h.newKey("main", storage.ProjectPlan{})
	return h
}

// newServer starts another API process on the same database and Redis.
func (h *harness) newServer(opts ...option) *httptest.Server {
	h.t.Helper()
	// TransformTimeout: a second, not the 50 ms default, which a loaded
	// machine under -race can miss on a script that is not a runaway; the
	// tests here look at what a budget run out says, not at how long it is.
	cfg := api.Config{DB: h.db, Redis: h.redis, Clock: h.clock, AllowPrivateNetworks: true, TransformTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(h.logs, nil)), Metrics: prometheus.NewRegistry()}
	if h.srv == nil { // the first server reports to h.registry
		cfg.Metrics = h.registry
	}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := api.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(s.Close)
	select { // else its first subscription may drop a key a test cached
	case <-s.Watching():
	case <-time.After(10 * time.Second):
		h.t.Fatal("the API's key-revocation watch did not subscribe within 10 s")
	}
	srv := httptest.NewServer(s)
	h.t.Cleanup(srv.Close)
	if h.apis == nil {
		h.apis = map[*httptest.Server]*api.Server{}
	}
	h.apis[srv] = s
	return srv
}

func (h *harness) newKey(project string, plan storage.ProjectPlan) string {
	h.t.Helper()
	key, _, err := h.db.Store().CreateAPIKey(context.Background(), project, plan)
	if err != nil {
		h.t.Fatal(err)
	}
	return key
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response body is not a JSON object: %v\n%s", err, r.body)
	}
	return m
}

// errorCode returns error.code of an error body.
func (r response) errorCode(t *testing.T) string {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

type req struct {
	method, path string
	body         any // string, []byte or a value to marshal
	key          string
	idem         string
	header       map[string]string
	server       *httptest.Server
}

func (h *harness) do(r req) response {
	h.t.Helper()
	var body io.Reader
	switch b := r.body.(type) {
	case nil:
	case string:
		body = bytes.NewBufferString(b)
	case []byte:
		body = bytes.NewBuffer(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		body = bytes.NewBuffer(raw)
	}
	srv := r.server
	if srv == nil {
		srv = h.srv
	}
	hr, err := http.NewRequest(r.method, srv.URL+r.path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	key := r.key
	if key == "" {
		key = h.key
	}
	if key != "-" {
		hr.Header.Set("Authorization", "Bearer "+key)
	}
	if r.idem != "" {
		hr.Header.Set("Idempotency-Key", r.idem)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// enqueued returns what rec was handed once every request answered so far
// has finished what it does after its answer (the enqueue).
func (h *harness) enqueued(rec *recorder) []string {
	for _, s := range h.apis {
		s.Wait()
	}
	return rec.list()
}

// count returns the number of rows of a table in the harness's schema.
func (h *harness) count(table string) int {
	h.t.Helper()
	var n int
	if err := h.db.Pool().QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

func expectStatus(t testing.TB, r response, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d; body %s", r.status, want, r.body)
	}
}

// createEndpoint makes an endpoint and returns its JSON.
func (h *harness) createEndpoint(body map[string]any) map[string]any {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/v1/endpoints", body: body, idem: uuid.NewString()})
	expectStatus(h.t, r, http.StatusCreated)
	return r.json(h.t)
}

// projectOf returns the id of the project key belongs to.
func (h *harness) projectOf(key string) string {
	h.t.Helper()
	var id string
	if err := h.db.Pool().QueryRow(context.Background(), `SELECT project_id FROM api_keys WHERE prefix = $1`, key[:8]).Scan(&id); err != nil {
		h.t.Fatal(err)
	}
	return id
}
