package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestEndpointFilter: a filter is shown as set, checked when set (400
// naming the path and the operator, nothing changed), removed with null,
// and an event of a subscribed type that does not match it gets no
// delivery to that endpoint, while one asked for by endpoint_ids does.
func TestEndpointFilter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	shipped := h.createEndpoint(map[string]any{"url": "https://hooks.example.com/shipped", "event_types": []string{"order.updated"},
		"filter": map[string]any{"data.status": "shipped", "data.total": map[string]any{"$gt": 100}}})
	all := h.createEndpoint(map[string]any{"url": "https://hooks.example.com/all", "event_types": []string{"order.updated"}})
	if f, ok := shipped["filter"].(map[string]any); !ok || f["data.status"] != "shipped" {
		t.Fatalf("created with filter %v", shipped["filter"])
	}
	if all["filter"] != nil {
		t.Fatalf("no filter shown as %v", all["filter"])
	}
	sid := shipped["id"].(string)

	for _, tt := range []struct{ body, field, says string }{
		{`{"filter":{"data.total":{"$gt":true}}}`, "filter.data.total", "$gt"},
		{`{"filter":{"data.x":{"$like":"a"}}}`, "filter.data.x", "$like"},
		{`{"filter":{"$xor":[]}}`, "filter", "$xor"},
		{`{"filter":[1]}`, "filter", "object"},
		{`{"filter":"shipped"}`, "filter", "object"},
	} {
		r := h.do(req{method: "PATCH", path: "/v1/endpoints/" + sid, body: tt.body})
		expectStatus(t, r, http.StatusBadRequest)
		out, _ := r.json(t)["error"].(map[string]any)
		if out["code"] != "validation_failed" || out["field"] != tt.field || !strings.Contains(out["message"].(string), tt.says) {
			t.Errorf("PATCH %s: %s; want field %s naming %s", tt.body, r.body, tt.field, tt.says)
		}
	}
	g := h.do(req{method: "GET", path: "/v1/endpoints/" + sid})
	if v := g.json(t)["version"]; v != 1.0 {
		t.Fatalf("a refused filter changed the endpoint: version %v", v)
	}

	n := 0
	key := func() map[string]string {
		n++
		return map[string]string{"Idempotency-Key": "filter-" + strconv.Itoa(n)}
	}
	post := func(data string) map[string]bool {
		r := h.do(req{method: "POST", path: "/v1/events", body: `{"type":"order.updated","data":` + data + `}`, header: key()})
		expectStatus(t, r, http.StatusAccepted)
		got := map[string]bool{}
		for _, d := range r.json(t)["deliveries"].([]any) {
			got[d.(map[string]any)["endpoint_id"].(string)] = true
		}
		return got
	}
	if got := post(`{"status":"shipped","total":120}`); !got[sid] || !got[all["id"].(string)] {
		t.Fatalf("a matching event went to %v", got)
	}
	if got := post(`{"status":"shipped","total":20}`); got[sid] || !got[all["id"].(string)] {
		t.Fatalf("an event the filter refuses went to %v", got)
	}
	r := h.do(req{method: "POST", path: "/v1/events", body: `{"type":"order.updated","data":{},"endpoint_ids":["` + sid + `"]}`, header: key()})
	expectStatus(t, r, http.StatusAccepted)
	if n := len(r.json(t)["deliveries"].([]any)); n != 1 {
		t.Fatalf("an event for the endpoint by name made %d deliveries, want 1", n)
	}

	r = h.do(req{method: "PATCH", path: "/v1/endpoints/" + sid, body: `{"filter":null}`})
	expectStatus(t, r, http.StatusOK)
	if out := r.json(t); out["filter"] != nil || out["version"] != 2.0 {
		t.Fatalf("filter removed: %s", r.body)
	}
	if got := post(`{"status":"pending"}`); !got[sid] {
		t.Fatalf("without its filter, an event went to %v", got)
	}
}

// TestFilterTest: POST /v1/endpoints/{id}/filter/test says whether the
// endpoint's filter (or one given to try) matches a past event or a given
// one, and sends nothing.
func TestFilterTest(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ep := h.createEndpoint(map[string]any{"url": "https://hooks.example.com/shipped", "filter": map[string]any{"data.status": "shipped"}})
	id := ep["id"].(string)
	try := func(body string, want int) map[string]any {
		t.Helper()
		r := h.do(req{method: "POST", path: "/v1/endpoints/" + id + "/filter/test", body: body})
		expectStatus(t, r, want)
		return r.json(t)
	}
	if m := try(`{"type":"order.updated","data":{"status":"shipped"}}`, http.StatusOK); m["match"] != true {
		t.Fatalf("shipped: %v", m)
	}
	if m := try(`{"type":"order.updated","data":{"status":"pending"}}`, http.StatusOK); m["match"] != false {
		t.Fatalf("pending: %v", m)
	}
	if m := try(`{"type":"order.updated","data":{"status":"pending"},"filter":{"data.status":{"$in":["pending"]}}}`, http.StatusOK); m["match"] != true {
		t.Fatalf("a filter tried before saving: %v", m)
	}
	r := h.do(req{method: "POST", path: "/v1/events", body: `{"type":"order.updated","data":{"status":"shipped"}}`,
		header: map[string]string{"Idempotency-Key": "past"}})
	expectStatus(t, r, http.StatusAccepted)
	if m := try(`{"event_id":"`+r.json(t)["id"].(string)+`"}`, http.StatusOK); m["match"] != true {
		t.Fatalf("past event: %v", m)
	}
	try(`{"event_id":"evt_nope"}`, http.StatusNotFound)
	try(`{"data":{}}`, http.StatusBadRequest)
	try(`{"type":"x","filter":{"data.a":{"$gt":[]}}}`, http.StatusBadRequest)
	if g := h.do(req{method: "GET", path: "/v1/endpoints/" + id}); g.json(t)["version"] != 1.0 {
		t.Fatal("trying a filter changed the endpoint")
	}
}
