package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/storage"
)

func TestCreateEventFansOutToSubscribedActiveEndpoints(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	all := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/all"})
	orders := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/orders", "event_types": []string{"order.created"}})
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/users", "event_types": []string{"user.created"}})
	off := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/off"})
	expectStatus(t, h.do(req{method: "PATCH", path: "/v1/endpoints/" + off["id"].(string), body: `{"status":"disabled"}`}), http.StatusOK)

	r := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "fan"})
	expectStatus(t, r, http.StatusAccepted)
	ev := r.json(t)
	for _, k := range []string{"id", "type", "data", "external_id", "created_at", "deliveries"} {
		if _, ok := ev[k]; !ok {
			t.Errorf("event lacks %q: %s", k, r.body)
		}
	}
	if !strings.HasPrefix(ev["id"].(string), "evt_") || ev["external_id"] != nil {
		t.Fatalf("event %s", r.body)
	}
	got := map[string]bool{}
	for _, d := range ev["deliveries"].([]any) {
		d := d.(map[string]any)
		if !strings.HasPrefix(d["id"].(string), "dlv_") || d["status"] != "pending" {
			t.Fatalf("delivery %v", d)
		}
		got[d["endpoint_id"].(string)] = true
	}
	if len(got) != 2 || !got[all["id"].(string)] || !got[orders["id"].(string)] {
		t.Fatalf("deliveries went to %v; want the catch-all and the orders endpoint", got)
	}

	// GET answers the same event.
	g := h.do(req{method: "GET", path: "/v1/events/" + ev["id"].(string)})
	expectStatus(t, g, http.StatusOK)
	if g.json(t)["id"] != ev["id"] || len(g.json(t)["deliveries"].([]any)) != 2 {
		t.Fatalf("GET event: %s", g.body)
	}

	// endpoint_ids picks endpoints regardless of their types; disabled ones get nothing.
	body := fmt.Sprintf(`{"type":"x","data":null,"endpoint_ids":[%q,%q]}`, orders["id"], off["id"])
	r = h.do(req{method: "POST", path: "/v1/events", body: body, idem: "listed"})
	expectStatus(t, r, http.StatusAccepted)
	ds := r.json(t)["deliveries"].([]any)
	if len(ds) != 1 || ds[0].(map[string]any)["endpoint_id"] != orders["id"] {
		t.Fatalf("listed deliveries %s", r.body)
	}
	r = h.do(req{method: "POST", path: "/v1/events", body: `{"type":"x","data":1,"endpoint_ids":["ep_nope"]}`, idem: "unknown-ep"})
	expectStatus(t, r, http.StatusBadRequest)
	if f := r.json(t)["error"].(map[string]any)["field"]; f != "endpoint_ids[0]" {
		t.Fatalf("field %v", f)
	}
}

func TestEventValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cases := []struct {
		body, code, field string
	}{
		{`{"type":"a","data":1,"extra":true}`, "validation_failed", "extra"},
		{`{"type":5,"data":1}`, "validation_failed", "type"},
		{`{"data":1}`, "validation_failed", "type"},
		{`{"type":"","data":1}`, "validation_failed", "type"},
		{`{"type":"has space","data":1}`, "validation_failed", "type"},
		{`{"type":"` + strings.Repeat("a", 129) + `","data":1}`, "validation_failed", "type"},
		{`{"type":"a"}`, "validation_failed", "data"},
		{`{"type":"a","data":1,"external_id":7}`, "validation_failed", "external_id"},
		{`{"type":"a","data":1,"endpoint_ids":"ep_1"}`, "validation_failed", "endpoint_ids"},
		{`[1,2]`, "validation_failed", "body"},
		{`{"type":"a",`, "invalid_json", ""},
	}
	for i, c := range cases {
		r := h.do(req{method: "POST", path: "/v1/events", body: c.body, idem: fmt.Sprint("v", i)})
		expectStatus(t, r, http.StatusBadRequest)
		e := r.json(t)["error"].(map[string]any)
		if e["code"] != c.code {
			t.Errorf("%s: code %v, want %s", c.body, e["code"], c.code)
		}
		if c.field != "" && (e["field"] != c.field || !strings.Contains(e["message"].(string), c.field)) {
			t.Errorf("%s: field %v / message %q, want %s named", c.body, e["field"], e["message"], c.field)
		}
		if !strings.HasPrefix(e["request_id"].(string), "req_") || e["request_id"] != r.header.Get("X-Request-Id") {
			t.Errorf("request_id %v vs header %q", e["request_id"], r.header.Get("X-Request-Id"))
		}
	}
	if n := h.count("events"); n != 0 {
		t.Fatalf("%d events written by bad requests", n)
	}
}

func TestPayloadTooLargeBeforeParsing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.MaxPayloadBytes = 1024 })
	// Not even JSON: the size is refused before any parsing.
	r := h.do(req{method: "POST", path: "/v1/events", body: strings.Repeat("x", 2000), idem: "big"})
	expectStatus(t, r, http.StatusRequestEntityTooLarge)
	if got := r.errorCode(t); got != "payload_too_large" {
		t.Fatalf("code %q", got)
	}
	// Just under the limit is fine.
	body := `{"type":"a","data":"` + strings.Repeat("y", 900) + `"}`
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events", body: body, idem: "fits"}), http.StatusAccepted)
	// A batch item's data is held to the single-event limit.
	item := `{"type":"a","data":"` + strings.Repeat("z", 1100) + `"}`
	r = h.do(req{method: "POST", path: "/v1/events/batch", body: `{"events":[{"type":"a","data":1},` + item + `]}`, idem: "bigitem"})
	expectStatus(t, r, http.StatusRequestEntityTooLarge)
	if f := r.json(t)["error"].(map[string]any)["field"]; f != "events[1].data" {
		t.Fatalf("field %v", f)
	}
}

func TestExternalIDTaken(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	first := h.do(req{method: "POST", path: "/v1/events", body: `{"type":"a","data":1,"external_id":"order-1"}`, idem: "e1"})
	expectStatus(t, first, http.StatusAccepted)
	r := h.do(req{method: "POST", path: "/v1/events", body: `{"type":"b","data":2,"external_id":"order-1"}`, idem: "e2"})
	expectStatus(t, r, http.StatusConflict)
	e := r.json(t)["error"].(map[string]any)
	if e["code"] != "external_id_taken" || e["existing_id"] != first.json(t)["id"] {
		t.Fatalf("409 body %s", r.body)
	}
	// Another project may use the same external_id.
	other := h.newKey("other", storage.ProjectPlan{})
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events", body: `{"type":"a","data":1,"external_id":"order-1"}`, idem: "e1", key: other}), http.StatusAccepted)
}

func TestBatchIsAtomicAndOrdered(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/all"})
	var items []string
	for i := range 5 {
		items = append(items, fmt.Sprintf(`{"type":"t.%d","data":{"i":%d}}`, i, i))
	}
	r := h.do(req{method: "POST", path: "/v1/events/batch", body: `{"events":[` + strings.Join(items, ",") + `]}`, idem: "b1"})
	expectStatus(t, r, http.StatusAccepted)
	data := r.json(t)["data"].([]any)
	if len(data) != 5 {
		t.Fatalf("%d events back", len(data))
	}
	for i, e := range data {
		if e.(map[string]any)["type"] != fmt.Sprintf("t.%d", i) || len(e.(map[string]any)["deliveries"].([]any)) != 1 {
			t.Fatalf("item %d: %v", i, e)
		}
	}

	bad := append([]string{}, items...)
	bad[3] = `{"type":"no spaces allowed","data":1}`
	r = h.do(req{method: "POST", path: "/v1/events/batch", body: `{"events":[` + strings.Join(bad, ",") + `]}`, idem: "b2"})
	expectStatus(t, r, http.StatusBadRequest)
	if f := r.json(t)["error"].(map[string]any)["field"]; f != "events[3].type" {
		t.Fatalf("field %v", f)
	}
	// An external_id clash at item 2 rejects the whole batch.
	clash := `{"events":[{"type":"a","data":1,"external_id":"new"},{"type":"a","data":1,"external_id":"taken"}]}`
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events", body: `{"type":"a","data":1,"external_id":"taken"}`, idem: "t"}), http.StatusAccepted)
	r = h.do(req{method: "POST", path: "/v1/events/batch", body: clash, idem: "b3"})
	expectStatus(t, r, http.StatusConflict)
	if n := h.count("events"); n != 6 {
		t.Fatalf("%d events; a rejected batch left some behind", n)
	}

	many := make([]string, api.MaxBatchEvents+1)
	for i := range many {
		many[i] = `{"type":"a","data":1}`
	}
	r = h.do(req{method: "POST", path: "/v1/events/batch", body: `{"events":[` + strings.Join(many, ",") + `]}`, idem: "b4"})
	expectStatus(t, r, http.StatusBadRequest)
	if f := r.json(t)["error"].(map[string]any)["field"]; f != "events" {
		t.Fatalf("field %v", f)
	}
}

func TestAuthAndProjectScope(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, key := range []string{"-", "whk_not_a_key"} {
		r := h.do(req{method: "GET", path: "/v1/endpoints", key: key})
		expectStatus(t, r, http.StatusUnauthorized)
		if r.errorCode(t) != "unauthorized" || r.header.Get("X-Request-Id") == "" {
			t.Fatalf("401 body %s", r.body)
		}
	}
	ep := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/a"})
	ev := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "x"}).json(t)
	other := h.newKey("intruder", storage.ProjectPlan{})
	for _, path := range []string{"/v1/events/" + ev["id"].(string), "/v1/endpoints/" + ep["id"].(string),
		"/v1/endpoints/" + ep["id"].(string) + "/secret"} {
		r := h.do(req{method: "GET", path: path, key: other})
		expectStatus(t, r, http.StatusNotFound)
		if r.errorCode(t) != "not_found" {
			t.Fatalf("%s: %s", path, r.body)
		}
	}
	r := h.do(req{method: "DELETE", path: "/v1/endpoints/" + ep["id"].(string), key: other})
	expectStatus(t, r, http.StatusNotFound)
	expectStatus(t, h.do(req{method: "GET", path: "/v1/endpoints/" + ep["id"].(string)}), http.StatusOK)
}
