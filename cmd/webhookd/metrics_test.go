package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd/storage"
)

// scrape returns every sample of /metrics at addr by its series text
// (`name{labels}`).
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	_, _, body := get(t, "http://"+addr+"/metrics")
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestOperatorMetrics drives `webhookd all` through what an operator
// watches and reads each series back from /metrics: requests by route and
// status, an idempotent replay, a rate-limit refusal, dead letters by
// reason, a re-enqueue by the reconciler of a delivery that had no task,
// a replay job's results, the oldest due delivery and the pool.
func TestOperatorMetrics(t *testing.T) {
	t.Parallel()
	m, key := startMain(t, Roles{API: true, Worker: true, Ops: true}, func(c *Config) {
		c.AllowPrivateNetworks, c.ReconcileInterval = true, 100*time.Millisecond
	})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(400) }))
	t.Cleanup(rc.Close)
	ctx := context.Background()
	callAPI(t, m.APIAddr, key, "POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q}`, rc.URL), true)
	for range 2 { // the second is replayed
		req, _ := http.NewRequest("POST", "http://"+m.APIAddr+"/v1/events", strings.NewReader(`{"type":"a","data":1}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", "same")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /v1/events: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	slowKey, _, err := m.DB.Store().CreateAPIKey(ctx, "slow", storage.ProjectPlan{RateLimitPerMinute: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // 200, then 429
		req, _ := http.NewRequest("GET", "http://"+m.APIAddr+"/v1/endpoints", nil)
		req.Header.Set("Authorization", "Bearer "+slowKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if i == 1 && resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("second request of a 1/min project: %d", resp.StatusCode)
		}
	}
	// An event written straight to PostgreSQL a minute ago has no task:
	// the reconciler gives it one.
	var projectID string
	if err := m.DB.Pool().QueryRow(ctx, `SELECT id FROM projects WHERE name = 'e2e'`).Scan(&projectID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DB.Store().CreateEvents(ctx, projectID, []storage.NewEvent{{Type: "b", Data: json.RawMessage("2")}},
		time.Now().Add(-time.Minute), func(int) string { return "" }); err != nil {
		t.Fatal(err)
	}
	var s map[string]float64
	deadline := time.Now().Add(20 * time.Second)
	for s = scrape(t, m.OpsAddr); s[`webhookd_dead_letters_total{reason="client_error"}`] < 2; s = scrape(t, m.OpsAddr) {
		if time.Now().After(deadline) {
			t.Fatalf("not 2 dead letters within 20s: %v", s[`webhookd_dead_letters_total{reason="client_error"}`])
		}
		time.Sleep(50 * time.Millisecond)
	}
	job := callAPI(t, m.APIAddr, key, "POST", "/v1/dead-letters/replay", `{}`, true)["job_id"].(string)
	for callAPI(t, m.APIAddr, key, "GET", "/v1/jobs/"+job, "", false)["status"] != "succeeded" {
		if time.Now().After(deadline) {
			t.Fatal("replay job not done within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s = scrape(t, m.OpsAddr)
	for series, want := range map[string]float64{
		`webhookd_api_requests_total{code="202",route="POST /v1/events"}`:                   2,
		`webhookd_api_requests_total{code="201",route="POST /v1/endpoints"}`:                1,
		`webhookd_api_requests_total{code="429",route="GET /v1/endpoints"}`:                 1,
		`webhookd_api_idempotent_replays_total{route="POST /v1/events"}`:                    1,
		`webhookd_api_rate_limited_total`:                                                   1,
		`webhookd_dead_letters_total{reason="client_error"}`:                                2,
		`webhookd_dead_letters_total{reason="exhausted"}`:                                   0,
		`webhookd_reconciler_reenqueued_total`:                                              1,
		`webhookd_dead_letter_replays_total{result="failed"}`:                               2,
		`webhookd_deliveries_oldest_due_seconds{status="pending"}`:                          0,
		`webhookd_deliveries_oldest_due_seconds{status="retrying"}`:                         0,
		`webhookd_jobs{status="running"}`:                                                   0,
		`webhookd_job_items_remaining`:                                                      0,
		`webhookd_api_request_duration_seconds_count{route="POST /v1/events"}`:              2,
		`webhookd_delivery_attempts_total{code="4xx",outcome="dead_letter",trigger="auto"}`: 2,
	} {
		if got, ok := s[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if s[`webhookd_db_pool_acquires_total`] < 1 || s[`webhookd_db_pool_max_connections`] != 20 {
		t.Errorf("pool metrics: %v acquires, %v max", s[`webhookd_db_pool_acquires_total`], s[`webhookd_db_pool_max_connections`])
	}
}
