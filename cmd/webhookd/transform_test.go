package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// slowScript's handler spends 200 ms before it answers: past the default
// budget (50 ms), within the one TestTransformTimeoutReachesAPIAndWorker sets.
const slowScript = `function handler(w) {
	var until = Date.now() + 200;
	while (Date.now() < until) {}
	w.payload = {text: "slow " + w.payload.data.n};
	return w;
}`

// TestTransformTimeoutReachesAPIAndWorker: WEBHOOKD_TRANSFORM_TIMEOUT is
// the budget of the API's test route and of the worker's runs — a script
// over the default budget but within the one set is tried and delivered,
// transformed.
func TestTransformTimeoutReachesAPIAndWorker(t *testing.T) {
	t.Parallel()
	m, key := startMain(t, Roles{API: true, Worker: true}, func(c *Config) {
		c.AllowPrivateNetworks, c.TransformTimeout = true, 2*time.Second
	})
	var (
		mu     sync.Mutex
		bodies []string
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	script, _ := json.Marshal(slowScript)
	ep := callAPI(t, m.APIAddr, key, "POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q,"transformation":%s}`, rc.URL, script), true)
	tried := callAPI(t, m.APIAddr, key, "POST", "/v1/endpoints/"+ep["id"].(string)+"/transformation/test",
		`{"type":"order.paid","data":{"n":1}}`, false)
	if tried["body"] != `{"text":"slow 1"}` {
		t.Fatalf("tried: %v", tried)
	}
	ev := callAPI(t, m.APIAddr, key, "POST", "/v1/events", `{"type":"order.paid","data":{"n":2}}`, true)
	dlv := ev["deliveries"].([]any)[0].(map[string]any)["id"].(string)
	deadline := time.Now().Add(20 * time.Second)
	for {
		d := callAPI(t, m.APIAddr, key, "GET", "/v1/deliveries/"+dlv, "", false)
		if d["status"] == "succeeded" {
			break
		}
		if d["status"] == "dead_letter" || time.Now().After(deadline) {
			t.Fatalf("delivery %v", d)
		}
		time.Sleep(50 * time.Millisecond) // a poll with a deadline
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 || bodies[0] != `{"text":"slow 2"}` {
		t.Fatalf("receiver got %q", bodies)
	}
}
