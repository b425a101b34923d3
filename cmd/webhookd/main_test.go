package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// env returns a getenv that answers from m, then nothing.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestMigrateAndKeysCreate(t *testing.T) {
	t.Parallel()
	schema, dbURL := testenv.Schema(t)
	_, redisURL := testenv.Redis(t)
	vars := map[string]string{"WEBHOOKD_DATABASE_URL": dbURL, "WEBHOOKD_REDIS_URL": redisURL}
	ctx := context.Background()
	for range 2 { // migrate is safe to rerun
		if err := run(ctx, []string{"migrate"}, env(vars), io.Discard, io.Discard); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	// The days ahead are made before any process serves.
	db, err := storage.Open(ctx, storage.Config{URL: testenv.DatabaseURL(), SearchPath: schema})
	if err != nil {
		t.Fatal(err)
	}
	days, err := db.Store().Days(ctx)
	db.Close()
	if err != nil || len(days) < 2 || days[len(days)-1].Hi.Before(time.Now().Add(dispatcher.DefaultDaysAhead)) {
		t.Fatalf("after migrate the days are %+v (%v); want them made %s ahead", days, err, dispatcher.DefaultDaysAhead)
	}
	var out, logs bytes.Buffer
	err = run(ctx, []string{"keys", "create", "--project", "acme", "--rate-limit", "100", "--idempotency-ttl", "48h"}, env(vars), &out, &logs)
	if err != nil {
		t.Fatalf("keys create: %v (%s)", err, logs.String())
	}
	if !regexp.MustCompile(`^whk_[A-Za-z0-9_-]{43}\n$`).MatchString(out.String()) {
		t.Fatalf("stdout %q: want the key alone on one line", out.String())
	}

	// Bad input is refused with a clear error and changes nothing.
	for _, args := range [][]string{
		{"keys", "create"},
		{"keys", "create", "--project", "acme", "--idempotency-ttl", "73h"},
		{"keys", "create", "--project", "acme", "--rate-limit", "-1"},
		{"keys", "list"},
		{"frobnicate"},
	} {
		var out bytes.Buffer
		if err := run(ctx, args, env(vars), &out, io.Discard); err == nil || out.Len() != 0 {
			t.Errorf("%v: err %v, stdout %q; want an error and no output", args, err, out.String())
		}
	}
	vars["WEBHOOKD_LOG_LEVEL"] = "loud"
	if err := run(ctx, []string{"migrate"}, env(vars), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "WEBHOOKD_LOG_LEVEL") {
		t.Fatalf("a bad variable was not named: %v", err)
	}
}

// startMain runs a webhookd process in a schema of its own with roles and
// returns it with an API key of a fresh project.
func startMain(t testing.TB, roles Roles, tweak func(*Config)) (*Main, string) {
	t.Helper()
	return startMainLogging(t, roles, tweak, io.Discard)
}

// startMainLogging is startMain with its log written to logs.
func startMainLogging(t testing.TB, roles Roles, tweak func(*Config), logs io.Writer) (*Main, string) {
	t.Helper()
	name, _ := testenv.Schema(t)
	_, redisURL := testenv.Redis(t)
	cfg := DefaultConfig()
	cfg.DatabaseURL, cfg.RedisURL = testenv.DatabaseURL(), redisURL
	cfg.APIAddr, cfg.DashboardAddr = "127.0.0.1:0", "127.0.0.1:0"
	if tweak != nil {
		tweak(&cfg)
	}
	m := NewMain(cfg, logs)
	m.SearchPath = name
	t.Cleanup(m.Close)
	ctx := context.Background()
	if err := m.OpenDB(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.DB.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key, _, err := m.DB.Store().CreateAPIKey(ctx, "e2e", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, roles); err != nil {
		t.Fatal(err)
	}
	return m, key
}

func TestServeAcceptsAnEvent(t *testing.T) {
	t.Parallel()
	m, key := startMain(t, Roles{API: true, Ops: true}, nil)
	ctx := context.Background()
	req, _ := http.NewRequest("POST", "http://"+m.APIAddr+"/v1/events", strings.NewReader(`{"type":"a.b","data":{}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200} {
		resp, err := http.Get("http://" + m.OpsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAllStartsAndAcceptsWithoutRedis: with Redis down from the start, the
// API still accepts events (they wait in PostgreSQL) and /readyz says 503.
func TestAllStartsAndAcceptsWithoutRedis(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "redis://" + ln.Addr().String() + "/0"
	ln.Close()
	m, key := startMain(t, Roles{API: true, Worker: true, Ops: true}, func(c *Config) { c.RedisURL = dead })
	req, _ := http.NewRequest("POST", "http://"+m.APIAddr+"/v1/events", strings.NewReader(`{"type":"a","data":1}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", "no-redis")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("X-RateLimit-Limit") == "" {
		t.Fatalf("without Redis: %d %v", resp.StatusCode, resp.Header)
	}
	var pending int
	if err := m.DB.Pool().QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&pending); err != nil || pending != 1 {
		t.Fatalf("%d events in PostgreSQL (%v)", pending, err)
	}
	r, err := http.Get("http://" + m.OpsAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d without Redis", r.StatusCode)
	}
}

// callAPI makes one API request with the key (and a fresh Idempotency-Key
// when idem) and returns its decoded JSON body, failing the test on an
// answer of 300 or more.
func callAPI(t testing.TB, addr, key, method, path, body string, idem bool) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	if idem {
		req.Header.Set("Idempotency-Key", uuid.NewString())
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %v", method, path, resp.StatusCode, out)
	}
	return out
}
