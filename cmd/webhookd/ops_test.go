package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/testenv"
)

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// get fetches url and returns its status, headers and body.
func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestEveryProcessKindAnswersHealthAndMetrics starts the real binary as
// `webhookd serve` and as `webhookd worker` and asks each for /healthz,
// /readyz and /metrics; serve's listener has the dashboard, the worker's
// does not.
func TestEveryProcessKindAnswersHealthAndMetrics(t *testing.T) {
	t.Parallel()
	_, _, dbURL := drillDB(t)
	_, redisURL := testenv.Redis(t)
	for _, kind := range []string{"serve", "worker"} {
		t.Run(kind, func(t *testing.T) {
			ops := freeAddr(t)
			cmd := exec.Command(os.Args[0], kind)
			cmd.Env = append(os.Environ(), "WEBHOOKD_TEST_MAIN=1", "WEBHOOKD_DATABASE_URL="+dbURL,
				"WEBHOOKD_REDIS_URL="+redisURL, "WEBHOOKD_API_ADDR="+freeAddr(t), "WEBHOOKD_DASHBOARD_ADDR="+ops,
				"WEBHOOKD_ADMIN_TOKEN=ops-test-admin-token-0123")
			var logs bytes.Buffer
			cmd.Stdout, cmd.Stderr = io.Discard, &logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cmd.Process.Kill()
				cmd.Wait()
				if t.Failed() {
					t.Logf("webhookd %s log:\n%s", kind, logs.String())
				}
			})
			deadline := time.Now().Add(20 * time.Second)
			for {
				if resp, err := http.Get("http://" + ops + "/healthz"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("webhookd %s: /healthz did not answer 200 within 20s", kind)
				}
				time.Sleep(50 * time.Millisecond)
			}
			status, hdr, body := get(t, "http://"+ops+"/readyz")
			var ready readiness
			if err := json.Unmarshal([]byte(body), &ready); err != nil || status != http.StatusOK ||
				ready.Status != "ok" || ready.Checks["postgres"] != "ok" || ready.Checks["redis"] != "ok" ||
				hdr.Get("Content-Type") != "application/json" {
				t.Fatalf("/readyz: %d %q %v", status, body, err)
			}
			status, _, body = get(t, "http://"+ops+"/metrics")
			for _, want := range []string{`webhookd_dependency_up{dependency="postgres"} 1`,
				`webhookd_dependency_up{dependency="redis"} 1`, `webhookd_db_pool_max_connections 20`,
				`webhookd_db_pool_connections{state="acquired"}`} {
				if status != http.StatusOK || !strings.Contains(body, want) {
					t.Errorf("/metrics (%d) lacks %s", status, want)
				}
			}
			status, hdr, _ = get(t, "http://"+ops+"/")
			switch {
			case kind == "serve" && (status != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/login")):
				t.Errorf("serve: / answered %d %v; want the dashboard's login redirect", status, hdr)
			case kind == "worker" && status != http.StatusNotFound:
				t.Errorf("worker: / answered %d; want 404 (no dashboard)", status)
			}
		})
	}
}

// TestReadyzNamesWhatIsDownAndNothingElse: with Redis unreachable and then
// PostgreSQL closed, /readyz answers 503 with Retry-After naming each
// dependency, and no host, port, user or driver error.
func TestReadyzNamesWhatIsDownAndNothingElse(t *testing.T) {
	t.Parallel()
	dead := freeAddr(t) // nothing listens here
	m, _ := startMain(t, Roles{API: true, Ops: true}, func(c *Config) { c.RedisURL = "redis://" + dead + "/0" })
	check := func(want readiness) {
		t.Helper()
		status, hdr, body := get(t, "http://"+m.OpsAddr+"/readyz")
		var got readiness
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("/readyz body %q: %v", body, err)
		}
		if status != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || got.Status != want.Status ||
			len(got.Checks) != 2 || got.Checks["postgres"] != want.Checks["postgres"] || got.Checks["redis"] != want.Checks["redis"] {
			t.Fatalf("/readyz: %d %v %q; want 503 with Retry-After and %+v", status, hdr, body, want)
		}
		_, port, _ := net.SplitHostPort(dead)
		for _, leak := range []string{"127.0.0.1", port, "postgres@", "dial", "refused", "closed"} {
			if strings.Contains(body, leak) {
				t.Errorf("/readyz %q leaks %q", body, leak)
			}
		}
	}
	check(readiness{Status: "unavailable", Checks: map[string]string{"postgres": "ok", "redis": "down"}})
	m.DB.Close()
	check(readiness{Status: "unavailable", Checks: map[string]string{"postgres": "down", "redis": "down"}})
	_, _, body := get(t, "http://"+m.OpsAddr+"/metrics")
	if !strings.Contains(body, `webhookd_dependency_up{dependency="postgres"} 0`) ||
		!strings.Contains(body, `webhookd_dependency_up{dependency="redis"} 0`) {
		t.Errorf("/metrics does not say both are down:\n%s", body)
	}
}

// TestReadyzShowsEachOutboxSource: a worker with a reachable outbox source
// and one whose database nobody listens for shows the first "ok" and the
// second "failing" with why and since when, naming no host, port, user or
// password, and still answers 200: a service's database being down is not
// webhookd's.
func TestReadyzShowsEachOutboxSource(t *testing.T) {
	t.Parallel()
	good, _ := outboxSource(t)
	dead := freeAddr(t)
	_, port, _ := net.SplitHostPort(dead)
	m, _ := startMain(t, Roles{Worker: true, Ops: true}, func(c *Config) {
		c.OutboxSources = "shop=" + good + " billing=postgres://svcuser:s3cret-pw@" + dead + "/orders?connect_timeout=2"
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, _, body := get(t, "http://"+m.OpsAddr+"/readyz")
		var got readiness
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("/readyz body %q: %v", body, err)
		}
		shop, billing := got.Outbox["shop"], got.Outbox["billing"]
		if shop.Status == "ok" && billing.Status == "failing" {
			if status != http.StatusOK || got.Status != "ok" || shop.Error != nil || billing.Since.IsZero() ||
				billing.Error == nil || *billing.Error != "cannot connect to the source database" {
				t.Fatalf("/readyz: %d %s", status, body)
			}
			for _, leak := range []string{"127.0.0.1", port, "svcuser", "s3cret", "orders", "refused"} {
				if strings.Contains(body, leak) {
					t.Errorf("/readyz %q leaks %q", body, leak)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %s; want shop ok and billing failing", status, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
