package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// expectError checks an error answer: status, the SPEC shape, code and
// field.
func expectError(t *testing.T, r response, status int, code, field string) {
	t.Helper()
	expectStatus(t, r, status)
	e, ok := r.json(t)["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object: %s", r.body)
	}
	if e["code"] != code || e["message"] == "" || !strings.HasPrefix(e["request_id"].(string), "req_") {
		t.Fatalf("error %s, want code %s", r.body, code)
	}
	if got, _ := e["field"].(string); got != field {
		t.Fatalf("field %q, want %q: %s", got, field, r.body)
	}
}

// TestTextPostgreSQLCannotStoreIsRefused: bytes that are not UTF-8, NUL
// characters and unpaired surrogates, wherever they come from, answer a
// 4xx naming what is wrong, and change nothing (they used to reach
// PostgreSQL and answer 500).
func TestTextPostgreSQLCannotStoreIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ep := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})["id"].(string)
	ev := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "seed"})
	expectStatus(t, ev, http.StatusAccepted)
	dlv := ev.json(t)["deliveries"].([]any)[0].(map[string]any)["id"].(string)
	before := h.rows(t)

	for _, tc := range []struct {
		name          string
		r             req
		status        int
		code, field   string
		createsRecord bool // a remembered 4xx leaves its idempotency record
	}{
		{"0xFF in data", req{method: "POST", path: "/v1/events", body: []byte("{\"type\":\"a\",\"data\":\"\xff\"}")},
			400, "invalid_json", "", true},
		{"NUL in data", req{method: "POST", path: "/v1/events", body: `{"type":"a","data":{"k":"a\u0000b"}}`},
			400, "validation_failed", "data", true},
		{"NUL in a data key", req{method: "POST", path: "/v1/events", body: `{"type":"a","data":{"\u0000":1}}`},
			400, "validation_failed", "data", true},
		{"unpaired surrogate in data", req{method: "POST", path: "/v1/events", body: `{"type":"a","data":"\ud800x"}`},
			400, "validation_failed", "data", true},
		{"lone low surrogate", req{method: "POST", path: "/v1/events", body: `{"type":"a","data":"\udc00"}`},
			400, "validation_failed", "data", true},
		{"NUL in external_id", req{method: "POST", path: "/v1/events", body: `{"type":"a","data":1,"external_id":"x\u0000"}`},
			400, "validation_failed", "external_id", true},
		{"NUL in endpoint_ids", req{method: "POST", path: "/v1/events", body: `{"type":"a","data":1,"endpoint_ids":["ep_\u0000"]}`},
			400, "validation_failed", "endpoint_ids", true},
		{"NUL in a batch item", req{method: "POST", path: "/v1/events/batch", body: `{"events":[{"type":"a","data":1},{"type":"a","data":"\u0000"}]}`},
			400, "validation_failed", "events[1].data", true},
		{"0xFF in a batch", req{method: "POST", path: "/v1/events/batch", body: []byte("{\"events\":[{\"type\":\"a\",\"data\":\"\xfe\"}]}")},
			400, "invalid_json", "", true},
		{"NUL in description", req{method: "POST", path: "/v1/endpoints", body: `{"url":"http://127.0.0.1:9/x","description":"\u0000"}`},
			400, "validation_failed", "description", true},
		{"NUL in a patched description", req{method: "PATCH", path: "/v1/endpoints/" + ep, body: `{"description":"a\u0000"}`},
			400, "validation_failed", "description", false},
		{"0xFF in a patch", req{method: "PATCH", path: "/v1/endpoints/" + ep, body: []byte("{\"description\":\"\xff\"}")},
			400, "invalid_json", "", false},
		{"NUL in a test event", req{method: "POST", path: "/v1/endpoints/" + ep + "/test", body: `{"data":"\u0000"}`},
			400, "validation_failed", "data", false},
		{"NUL in a replay filter", req{method: "POST", path: "/v1/dead-letters/replay", body: `{"event_type":"\u0000"}`},
			400, "validation_failed", "event_type", true},
		{"NUL in a redeliver body", req{method: "POST", path: "/v1/deliveries/" + dlv + "/redeliver", body: `{"\u0000":1}`},
			400, "validation_failed", "\x00", true},
		{"NUL in a path id", req{method: "GET", path: "/v1/events/evt_%00"}, 404, "not_found", "", false},
		{"0xFF in a path id", req{method: "GET", path: "/v1/endpoints/ep_%FF"}, 404, "not_found", "", false},
		{"0xFF in a patched path id", req{method: "PATCH", path: "/v1/endpoints/%FF", body: `{}`}, 404, "not_found", "", false},
		{"0xFF in a redeliver path id", req{method: "POST", path: "/v1/deliveries/%FF/redeliver"}, 404, "not_found", "", false},
		{"NUL in a query parameter", req{method: "GET", path: "/v1/deliveries?endpoint_id=%00"}, 400, "validation_failed", "endpoint_id", false},
		{"0xFF in a query parameter", req{method: "GET", path: "/v1/dead-letters?event_type=%FF"}, 400, "validation_failed", "event_type", false},
		{"0xFF in a parameter name", req{method: "GET", path: "/v1/endpoints?%FF=1"}, 400, "validation_failed", "query", false},
		{"bad query escaping", req{method: "GET", path: "/v1/deliveries?status=%zz"}, 400, "validation_failed", "query", false},
		{"a cursor of 0xFF", req{method: "GET", path: "/v1/endpoints?cursor=_w"}, 400, "validation_failed", "cursor", false},
		{"0xFF in the Idempotency-Key", req{method: "POST", path: "/v1/events", body: eventBody,
			header: map[string]string{"Idempotency-Key": "k\xff"}}, 400, "validation_failed", "Idempotency-Key", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.r.method == "POST" && tc.r.header == nil {
				tc.r.idem = "key-" + tc.name
			}
			r := h.do(tc.r)
			expectError(t, r, tc.status, tc.code, tc.field)
			want := before
			if tc.createsRecord { // SPEC §2 remembers a 4xx under its key
				want.idempotency++
				before = want
			}
			if got := h.rows(t); got != want {
				t.Fatalf("a refused request changed the database: %+v, want %+v", got, want)
			}
		})
	}
}

// TestUnknownMethodAnswers405WithAllow: a known path under a method it
// lacks answers 405 method_not_allowed with Allow, in the SPEC's error
// shape; an unknown path 404 not_found in the same shape; neither is
// remembered under an Idempotency-Key.
func TestUnknownMethodAnswers405WithAllow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/v1/events", "POST"},
		{"GET", "/v1/events", "POST"},
		{"DELETE", "/v1/events/evt_1", "GET, HEAD"},
		{"POST", "/v1/endpoints/ep_1", "GET, HEAD, PATCH, DELETE"},
		{"PUT", "/v1/endpoints", "GET, HEAD, POST"},
		{"GET", "/v1/deliveries/dlv_1/redeliver", "POST"},
		{"OPTIONS", "/v1/dead-letters", "GET, HEAD"},
	} {
		r := h.do(req{method: tc.method, path: tc.path, idem: "k-405"})
		expectError(t, r, http.StatusMethodNotAllowed, "method_not_allowed", "")
		if got := r.header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
		if r.header.Get("X-Request-Id") == "" {
			t.Errorf("%s %s: no X-Request-Id", tc.method, tc.path)
		}
	}
	for _, path := range []string{"/v2/events", "/v1/events/evt_1/nope", "/"} {
		r := h.do(req{method: "GET", path: path})
		expectError(t, r, http.StatusNotFound, "not_found", "")
		if r.header.Get("Allow") != "" {
			t.Errorf("%s: a 404 with Allow %q", path, r.header.Get("Allow"))
		}
	}
	if n := h.count("idempotency_records"); n != 0 {
		t.Fatalf("a 405 left %d idempotency records", n)
	}
	// The key the 405 carried still works for the route's own method.
	r := h.do(req{method: "POST", path: "/v1/events", body: eventBody, idem: "k-405"})
	expectStatus(t, r, http.StatusAccepted)
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("the POST replayed something")
	}
}

// TestAuthorizationSchemeIsCaseInsensitive (RFC 9110 §11.1).
func TestAuthorizationSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, v := range []string{"Bearer " + h.key, "bearer " + h.key, "BEARER " + h.key, "bEaReR   " + h.key + " "} {
		r := h.do(req{method: "GET", path: "/v1/endpoints", key: "-", header: map[string]string{"Authorization": v}})
		expectStatus(t, r, http.StatusOK)
	}
	for _, v := range []string{"", "Bearer", "Bearer ", "Bearer" + h.key, "Basic " + h.key, "Token " + h.key,
		"Bearer " + h.key + "x", "Bearer \xff", "Bearers " + h.key} {
		r := h.do(req{method: "GET", path: "/v1/endpoints", key: "-", header: map[string]string{"Authorization": v}})
		expectError(t, r, http.StatusUnauthorized, "unauthorized", "")
	}
}
