package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

func openAPIValidator(t *testing.T) validator.Validator {
	t.Helper()
	doc, err := libopenapi.NewDocument(api.OpenAPIDocument())
	if err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("openapi.json: %v", errs)
	}
	return v
}

// TestOpenAPIDocumentIsValid checks api/openapi.json against the OpenAPI
// 3.1 schema.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	v := openAPIValidator(t)
	if ok, errs := v.ValidateDocument(); !ok {
		for _, e := range errs {
			t.Errorf("%s: %s (%s)", e.ValidationType, e.Message, e.HowToFix)
			for _, se := range e.SchemaValidationErrors {
				t.Errorf("  %s: %s", se.FieldPath, se.Reason)
			}
		}
	}
}

// TestRealResponsesMatchTheDocument walks every route with the real server
// and checks each request and answer, errors included, against the
// document.
func TestRealResponsesMatchTheDocument(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	v := openAPIValidator(t)
	check := func(method, path string, body any, header map[string]string, want int) map[string]any {
		t.Helper()
		var raw []byte
		if body != nil {
			raw, _ = json.Marshal(body)
		}
		newReq := func() *http.Request {
			r, err := http.NewRequest(method, h.srv.URL+path, bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			if raw != nil {
				r.Header.Set("Content-Type", "application/json")
			}
			r.Header.Set("Authorization", "Bearer "+h.key)
			for k, val := range header {
				r.Header.Set(k, val)
			}
			return r
		}
		resp, err := http.DefaultClient.Do(newReq())
		if err != nil {
			t.Fatal(err)
		}
		respBody, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, respBody)
		}
		resp.Body = io.NopCloser(bytes.NewReader(respBody))
		validate := v.ValidateHttpRequestResponse
		if want == http.StatusBadRequest { // the request breaks the document on purpose
			validate = v.ValidateHttpResponse
		}
		if ok, errs := validate(newReq(), resp); !ok {
			for _, e := range errs {
				t.Errorf("%s %s → %d: %s: %s", method, path, resp.StatusCode, e.Message, e.Reason)
				for _, se := range e.SchemaValidationErrors {
					t.Errorf("  %s: %s", se.FieldPath, se.Reason)
				}
			}
		}
		var m map[string]any
		json.Unmarshal(respBody, &m)
		return m
	}
	key := func() map[string]string { return map[string]string{"Idempotency-Key": uuid.NewString()} }

	ep := check("POST", "/v1/endpoints", map[string]any{"url": "http://127.0.0.1:9/hook", "description": "orders",
		"event_types": []string{"order.paid"}, "rate_limit_per_second": 5}, key(), 201)
	epID := ep["id"].(string)
	check("GET", "/v1/endpoints?limit=10", nil, nil, 200)
	check("GET", "/v1/endpoints/"+epID, nil, nil, 200)
	check("PATCH", "/v1/endpoints/"+epID, map[string]any{"description": "orders v2", "max_in_flight": nil},
		map[string]string{"If-Match": `"1"`}, 200)
	check("PATCH", "/v1/endpoints/"+epID, map[string]any{"description": "x"}, map[string]string{"If-Match": "1"}, 412)
	check("GET", "/v1/endpoints/"+epID+"/secret", nil, nil, 200)
	rotate := key()
	check("POST", "/v1/endpoints/"+epID+"/rotate-secret", map[string]any{}, rotate, 200)
	check("POST", "/v1/endpoints/"+epID+"/rotate-secret", map[string]any{}, rotate, 200) // replayed
	check("POST", "/v1/endpoints/"+epID+"/test", map[string]any{"data": map[string]any{"hello": 1}}, nil, 202)

	ev := check("POST", "/v1/events", map[string]any{"type": "order.paid", "data": map[string]any{"order": 7},
		"external_id": "order-7"}, key(), 202)
	check("POST", "/v1/events/batch", map[string]any{"events": []map[string]any{
		{"type": "order.paid", "data": 1}, {"type": "order.shipped", "data": nil, "endpoint_ids": []string{epID}}}}, key(), 202)
	check("GET", "/v1/events/"+ev["id"].(string), nil, nil, 200)
	dlvID := ev["deliveries"].([]any)[0].(map[string]any)["id"].(string)
	// A delivery that waits, so that a waiting_reason other than null is
	// checked against the document too.
	if _, err := h.db.Pool().Exec(t.Context(), `UPDATE deliveries SET waiting_reason = 'fifo_turn' WHERE id = $1`,
		dlvID); err != nil {
		t.Fatal(err)
	}
	if d := check("GET", "/v1/deliveries/"+dlvID, nil, nil, 200); d["waiting_reason"] != "fifo_turn" {
		t.Errorf("waiting delivery: %v", d)
	}
	check("GET", "/v1/deliveries?status=pending&limit=1", nil, nil, 200)
	testenv.Record(t, h.db, dlvID, webhookd.Attempt{StatusCode: new(400)},
		storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonClientError})
	check("GET", "/v1/deliveries/"+dlvID, nil, nil, 200)
	check("GET", "/v1/dead-letters?event_type=order.paid", nil, nil, 200)
	check("POST", "/v1/deliveries/"+dlvID+"/redeliver", map[string]any{}, key(), 202)
	job := check("POST", "/v1/dead-letters/replay", map[string]any{"event_type": "order.paid", "since": "2020-01-01T00:00:00Z"}, key(), 202)
	check("GET", "/v1/jobs/"+job["job_id"].(string), nil, nil, 200)

	// The catalog and portal links.
	check("POST", "/v1/event-types", map[string]any{"name": "invoice.paid", "description": "An invoice was paid.",
		"schema": map[string]any{"type": "object", "required": []string{"amount"}}, "example": map[string]any{"amount": 5},
		"validate": true}, key(), 201)
	check("POST", "/v1/event-types", map[string]any{"name": "order.paid"}, key(), 201)
	check("GET", "/v1/event-types?limit=1", nil, nil, 200)
	check("GET", "/v1/event-types/invoice.paid", nil, nil, 200)
	check("PATCH", "/v1/event-types/invoice.paid", map[string]any{"description": "Paid.", "example": nil}, nil, 200)
	check("DELETE", "/v1/event-types/order.paid", nil, nil, 200)
	check("GET", "/v1/event-types?archived=true", nil, nil, 200)
	check("POST", "/v1/events", map[string]any{"type": "invoice.paid", "data": map[string]any{}}, key(), 400)
	check("POST", "/v1/portal-sessions", map[string]any{"ttl": "1h"}, key(), 201)
	check("POST", "/v1/portal-sessions", nil, key(), 201)

	// Errors.
	check("POST", "/v1/events", map[string]any{"type": "bad type", "data": 1}, key(), 400)
	check("POST", "/v1/events", map[string]any{"type": "a", "data": 1}, nil, 400)
	check("POST", "/v1/events", map[string]any{"type": "order.paid", "data": 1, "external_id": "order-7"}, key(), 409)
	same := key()
	check("POST", "/v1/events", map[string]any{"type": "a", "data": 1}, same, 202)
	check("POST", "/v1/events", map[string]any{"type": "a", "data": 2}, same, 422)
	big := make([]byte, 70000)
	for i := range big {
		big[i] = 'x'
	}
	check("POST", "/v1/events", map[string]any{"type": "a", "data": string(big)}, key(), 413)
	check("GET", "/v1/events/evt_missing", nil, nil, 404)
	check("GET", "/v1/deliveries?limit="+strconv.Itoa(500), nil, nil, 400)
	check("DELETE", "/v1/endpoints/"+epID, nil, nil, 204)
	check("GET", "/v1/jobs/job_missing", nil, map[string]string{"Authorization": "Bearer wrong"}, 401)

	// The document itself, without a key.
	resp, err := http.Get(h.srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(served, api.OpenAPIDocument()) || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("GET /v1/openapi.json without a key: %d, %d bytes", resp.StatusCode, len(served))
	}
}

// TestDocumentListsEveryWaitingReason: the document's WaitingReason is
// exactly the domain's reasons, and null.
func TestDocumentListsEveryWaitingReason(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Enum []any `json:"enum"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	var want []any
	for _, r := range webhookd.WaitingReasons {
		want = append(want, r)
	}
	want = append(want, nil)
	if got := doc.Components.Schemas["WaitingReason"].Enum; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("WaitingReason's enum %v, want %v", got, want)
	}
}
