package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestEndpointTransformation: a transformation is shown as set (null for
// none), checked when set (400 validation_failed, field transformation,
// the script's error, nothing changed), and removed with null.
func TestEndpointTransformation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const src = `function handler(w) { w.payload = {text: w.payload.type}; return w }`
	ep := h.createEndpoint(map[string]any{"url": "https://hooks.example.com/slack", "transformation": src})
	if ep["transformation"] != src {
		t.Fatalf("created with transformation %v", ep["transformation"])
	}
	plain := h.createEndpoint(map[string]any{"url": "https://hooks.example.com/plain"})
	if v, ok := plain["transformation"]; !ok || v != nil {
		t.Fatalf("no transformation shown as %v (present %v)", v, ok)
	}
	id := ep["id"].(string)
	for _, tt := range []struct{ body, says string }{
		{`{"transformation":"function handler(w) { return w "}`, "syntax error"},
		{`{"transformation":"var x = 1"}`, "must define function handler"},
		{`{"transformation":"while (true) {}"}`, "time budget"},
		{`{"transformation":"throw new Error('at load')"}`, "at load"},
		{`{"transformation":"  "}`, "handler"},
		{`{"transformation":5}`, "string"},
	} {
		r := h.do(req{method: "PATCH", path: "/v1/endpoints/" + id, body: tt.body})
		expectStatus(t, r, http.StatusBadRequest)
		out, _ := r.json(t)["error"].(map[string]any)
		if out["code"] != "validation_failed" || out["field"] != "transformation" || !strings.Contains(out["message"].(string), tt.says) {
			t.Errorf("PATCH %s: %s; want field transformation saying %q", tt.body, r.body, tt.says)
		}
	}
	r := h.do(req{method: "POST", path: "/v1/endpoints", body: `{"url":"https://hooks.example.com/x","transformation":"nope("}`})
	expectStatus(t, r, http.StatusBadRequest)
	if g := h.do(req{method: "GET", path: "/v1/endpoints/" + id}); g.json(t)["version"] != 1.0 {
		t.Fatal("a refused transformation changed the endpoint")
	}
	r = h.do(req{method: "PATCH", path: "/v1/endpoints/" + id, body: `{"transformation":null}`})
	expectStatus(t, r, http.StatusOK)
	if out := r.json(t); out["transformation"] != nil || out["version"] != 2.0 {
		t.Fatalf("transformation removed: %s", r.body)
	}
}

// TestTransformationTest: POST /v1/endpoints/{id}/transformation/test
// shows the request the endpoint's transformation (or one given to try)
// makes of a past event or a given one, a cancel, or the script's error.
func TestTransformationTest(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ep := h.createEndpoint(map[string]any{"url": "https://hooks.example.com/in", "transformation": `function handler(w) {
		if (w.payload.data.skip) { return {cancel: true} }
		w.payload = {text: "order " + w.payload.data.id};
		w.headers["x-partner"] = "p1";
		w.url = "https://hooks.example.com/slack?c=1";
		return w }`})
	id := ep["id"].(string)
	try := func(body string, want int) map[string]any {
		t.Helper()
		r := h.do(req{method: "POST", path: "/v1/endpoints/" + id + "/transformation/test", body: body})
		expectStatus(t, r, want)
		return r.json(t)
	}
	m := try(`{"type":"order.paid","data":{"id":"o_1"}}`, http.StatusOK)
	hs, _ := m["headers"].(map[string]any)
	if m["send"] != true || m["url"] != "https://hooks.example.com/slack?c=1" || m["body"] != `{"text":"order o_1"}` ||
		hs["x-partner"] != "p1" || hs["content-type"] != "application/json" {
		t.Fatalf("given event: %v", m)
	}
	if m := try(`{"type":"order.paid","data":{"skip":true}}`, http.StatusOK); m["send"] != false || m["body"] != nil || m["url"] != nil {
		t.Fatalf("canceled: %v", m)
	}
	// Tried before saving: null shows the request as webhookd makes it.
	m = try(`{"type":"order.paid","data":{"id":"o_2"},"transformation":null}`, http.StatusOK)
	var body struct {
		Type string
		Data map[string]any
	}
	if b, _ := m["body"].(string); json.Unmarshal([]byte(b), &body) != nil || body.Type != "order.paid" || body.Data["id"] != "o_2" ||
		m["url"] != "https://hooks.example.com/in" {
		t.Fatalf("no transformation: %v", m)
	}
	r := h.do(req{method: "POST", path: "/v1/events", body: `{"type":"order.paid","data":{"id":"o_past"}}`,
		header: map[string]string{"Idempotency-Key": "past"}})
	expectStatus(t, r, http.StatusAccepted)
	if m := try(`{"event_id":"`+r.json(t)["id"].(string)+`"}`, http.StatusOK); m["body"] != `{"text":"order o_past"}` {
		t.Fatalf("past event: %v", m)
	}
	for _, tt := range []struct{ body, says string }{
		{`{"type":"x","data":{},"transformation":"function handler(w) { throw new Error('no id') }"}`, "no id"},
		{`{"type":"x","data":{},"transformation":"function handler(w) { for (;;) {} }"}`, "time budget"},
		{`{"type":"x","data":{},"transformation":"function handler(w) { w.url = 'https://evil.example.com/'; return w }"}`, "host"},
	} {
		out, _ := try(tt.body, http.StatusBadRequest)["error"].(map[string]any)
		if out["code"] != "validation_failed" || out["field"] != "transformation" || !strings.Contains(out["message"].(string), tt.says) {
			t.Errorf("%s: %v; want field transformation saying %q", tt.body, out, tt.says)
		}
	}
	try(`{"event_id":"evt_nope"}`, http.StatusNotFound)
	try(`{"data":{}}`, http.StatusBadRequest)
	try(`{"event_id":"evt_x","type":"x"}`, http.StatusBadRequest)
	if g := h.do(req{method: "GET", path: "/v1/endpoints/" + id}); g.json(t)["version"] != 1.0 {
		t.Fatal("trying a transformation changed the endpoint")
	}
	// canceled is a status the deliveries list filters by, like the others.
	expectStatus(t, h.do(req{method: "GET", path: "/v1/deliveries?status=canceled"}), http.StatusOK)
}
