package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TestAllDeliversSignedAndReplaysDeadLetters runs `webhookd all` in-process:
// an endpoint at a local receiver gets a signed event; a dead letter is then
// replayed through a background job.
func TestAllDeliversSignedAndReplaysDeadLetters(t *testing.T) {
	t.Parallel()
	m, key := startMain(t, Roles{API: true, Worker: true, Ops: true}, func(c *Config) {
		c.AllowPrivateNetworks, c.RetrySchedule = true, "1s"
	})

	var mu sync.Mutex
	answer := 400
	var got []*http.Request
	var bodies [][]byte
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got, bodies = append(got, r), append(bodies, b)
		w.WriteHeader(answer)
	}))
	t.Cleanup(rc.Close)

	call := func(method, path, body string, idem bool) map[string]any {
		t.Helper()
		return callAPI(t, m.APIAddr, key, method, path, body, idem)
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	ep := call("POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q}`, rc.URL+"/hook"), true)
	ev := call("POST", "/v1/events", `{"type":"invoice.paid","data":{"amount":100}}`, true)
	dlv := ev["deliveries"].([]any)[0].(map[string]any)["id"].(string)
	poll("dead letter", func() bool { return call("GET", "/v1/deliveries/"+dlv, "", false)["status"] == "dead_letter" })

	mu.Lock()
	wh, _ := standardwebhooks.NewWebhook(ep["secret"].(string))
	if err := wh.Verify(bodies[0], got[0].Header); err != nil {
		t.Fatalf("signature: %v", err)
	}
	answer = 200
	mu.Unlock()

	dls := call("GET", "/v1/dead-letters", "", false)["data"].([]any)
	if len(dls) != 1 || dls[0].(map[string]any)["reason"] != "client_error" {
		t.Fatalf("dead letters %v", dls)
	}
	job := call("POST", "/v1/dead-letters/replay", `{}`, true)["job_id"].(string)
	var j map[string]any
	poll("replay job", func() bool { j = call("GET", "/v1/jobs/"+job, "", false); return j["status"] == "succeeded" })
	if j["total"] != 1.0 || j["done"] != 1.0 || j["failed_count"] != 0.0 || j["finished_at"] == nil {
		t.Fatalf("job %v", j)
	}
	d := call("GET", "/v1/deliveries/"+dlv, "", false)
	if d["status"] != "succeeded" || len(d["attempts"].([]any)) != 2 {
		t.Fatalf("after replay %v", d)
	}
	if dl := call("GET", "/v1/dead-letters", "", false)["data"].([]any)[0].(map[string]any); dl["replayed_at"] == nil {
		t.Fatalf("dead letter not marked replayed: %v", dl)
	}
	resp, err := http.Get("http://" + m.OpsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{`webhookd_delivery_attempts_total{code="4xx",outcome="dead_letter",trigger="auto"} 1`,
		`webhookd_delivery_attempts_total{code="2xx",outcome="succeeded",trigger="manual"} 1`, `webhookd_queue_tasks{state="pending"}`} {
		if !strings.Contains(string(metrics), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}
