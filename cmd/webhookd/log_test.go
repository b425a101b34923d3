package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAttemptLogLine: logging to something that is not a terminal, every
// line is JSON; an attempt makes one line with its fields; and no line
// carries the endpoint's secret, the API key, the payload or the
// receiver's answer.
func TestAttemptLogLine(t *testing.T) {
	t.Parallel()
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "receiver-answer-marker")
	}))
	t.Cleanup(rc.Close)
	logs := &lockedBuffer{}
	m, key := startMainLogging(t, Roles{API: true, Worker: true, Ops: true}, func(c *Config) {
		c.AllowPrivateNetworks, c.RetrySchedule, c.AdminToken = true, "1h", "log-test-admin-token-0123"
	}, logs)
	ep := callAPI(t, m.APIAddr, key, "POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q}`, rc.URL+"/hook"), true)
	ev := callAPI(t, m.APIAddr, key, "POST", "/v1/events", `{"type":"invoice.paid","data":{"card":"payload-marker-4242"}}`, true)
	dlv := ev["deliveries"].([]any)[0].(map[string]any)["id"].(string)

	var line map[string]any
	deadline := time.Now().Add(20 * time.Second)
	for line == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no attempt line within 20s:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var l map[string]any
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("a log line is not JSON: %q", sc.Text())
			}
			if l["msg"] == "delivery attempt" {
				line = l
			}
		}
	}
	for field, want := range map[string]any{"level": "INFO", "delivery_id": dlv, "event_id": ev["id"],
		"endpoint_id": ep["id"], "attempt": 1.0, "status_code": 503.0, "outcome": "retrying", "trigger": "auto"} {
		if line[field] != want {
			t.Errorf("attempt line %s = %v, want %v (%v)", field, line[field], want, line)
		}
	}
	if id, _ := line["request_id"].(string); !strings.HasPrefix(id, "req_") {
		t.Errorf("attempt line request_id %v", line["request_id"])
	}
	if _, ok := line["duration_ms"].(float64); !ok {
		t.Errorf("attempt line duration_ms %v", line["duration_ms"])
	}
	all := logs.String()
	for what, secret := range map[string]string{"the endpoint secret": ep["secret"].(string), "the API key": key,
		"the payload": "payload-marker-4242", "the receiver's answer": "receiver-answer-marker", "a secret prefix": "whsec_"} {
		if strings.Contains(all, secret) {
			t.Errorf("the log carries %s:\n%s", what, all)
		}
	}
}
