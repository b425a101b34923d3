package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// Keys of the Delivery and Attempt shapes (SPEC §2).
var (
	deliveryKeys = []string{"id", "event_id", "endpoint_id", "event_type", "status", "attempts_count",
		"next_attempt_at", "waiting_reason", "last_status_code", "last_error", "created_at", "updated_at"}
	attemptKeys = []string{"number", "request_id", "url", "trigger", "status_code", "error", "duration_ms",
		"started_at", "request_headers", "response_headers", "response_body", "trace_id"}
)

// expectKeys fails unless obj has exactly keys.
func expectKeys(t testing.TB, obj map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := obj[k]; !ok {
			t.Errorf("%q missing from %v", k, obj)
		}
	}
	if len(obj) != len(keys) {
		t.Errorf("keys of %v, want exactly %v", obj, keys)
	}
}

// recorder is an Enqueuer that records what it is handed.
type recorder struct {
	mu    sync.Mutex
	calls []string
	err   error
}

func (r *recorder) record(call string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
	return r.err
}

func (r *recorder) Enqueue(_ context.Context, ds ...webhookd.ScheduledDelivery) error {
	for _, d := range ds {
		r.record("auto " + d.ID)
	}
	return r.err
}

func (r *recorder) EnqueueManual(_ context.Context, taskID, deliveryID, by string) error {
	if !strings.HasPrefix(taskID, "req_") {
		return fmt.Errorf("task id %q is not a request id", taskID)
	}
	return r.record("manual " + deliveryID + " " + by)
}

func (r *recorder) EnqueueJob(_ context.Context, jobID string) error { return r.record("job " + jobID) }

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func withEnqueuer(e webhookd.Enqueuer) option { return func(c *api.Config) { c.Enqueuer = e } }

// send posts an event of type typ to the endpoints and returns its event id
// and delivery ids, in the endpoints' order.
func (h *harness) send(typ string, endpointIDs ...string) (string, []string) {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/v1/events", idem: uuid.NewString(),
		body: map[string]any{"type": typ, "data": map[string]any{"n": 1}, "endpoint_ids": endpointIDs}})
	expectStatus(h.t, r, http.StatusAccepted)
	ev := r.json(h.t)
	var ids []string
	for _, d := range ev["deliveries"].([]any) {
		ids = append(ids, d.(map[string]any)["id"].(string))
	}
	return ev["id"].(string), ids
}

// attempt records an attempt of the delivery (numbered after its last) as
// the worker would, and moves the delivery as t says (t.Now defaults to the
// harness clock).
func (h *harness) attempt(deliveryID string, a webhookd.Attempt, t storage.Transition) webhookd.Attempt {
	h.t.Helper()
	if t.Now.IsZero() {
		t.Now = h.clock.Now()
	}
	return testenv.Record(h.t, h.db, deliveryID, a, t)
}

// deadLetter moves the delivery to the dead letters after a 500.
func (h *harness) deadLetter(deliveryID string) {
	h.t.Helper()
	h.attempt(deliveryID, webhookd.Attempt{StatusCode: new(500)},
		storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonExhausted})
}

// ids returns the ids of a list response's data, and its next_cursor.
func ids(t testing.TB, r response) ([]string, string) {
	t.Helper()
	body := r.json(t)
	var out []string
	for _, d := range body["data"].([]any) {
		out = append(out, d.(map[string]any)["id"].(string))
	}
	next, ok := body["next_cursor"]
	if !ok {
		t.Fatalf("next_cursor omitted: %s", r.body)
	}
	cursor, _ := next.(string)
	return out, cursor
}

func TestListDeliveriesFiltersAndPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/a"})["id"].(string)
	b := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/b"})["id"].(string)
	_, d1 := h.send("order.created", a, b)
	ev2, d2 := h.send("order.created", a)
	h.clock.Advance(time.Hour)
	later := h.clock.Now()
	_, d3 := h.send("user.created", b)
	_, d4 := h.send("user.created", a)
	h.attempt(d1[0], webhookd.Attempt{StatusCode: new(200)}, storage.Transition{Status: webhookd.DeliverySucceeded})
	h.deadLetter(d3[0])
	all := []string{d4[0], d3[0], d2[0], d1[1], d1[0]} // newest first

	r := h.do(req{method: "GET", path: "/v1/deliveries"})
	expectStatus(t, r, http.StatusOK)
	if got, next := ids(t, r); !slices.Equal(got, all) || next != "" {
		t.Fatalf("list %v next %q, want %v", got, next, all)
	}
	for _, d := range r.json(t)["data"].([]any) {
		expectKeys(t, d.(map[string]any), deliveryKeys...)
	}

	cases := map[string][]string{
		"status=pending":           {d4[0], d2[0], d1[1]},
		"status=succeeded":         {d1[0]},
		"status=dead_letter":       {d3[0]},
		"status=retrying":          nil,
		"endpoint_id=" + b:         {d3[0], d1[1]},
		"event_type=order.created": {d2[0], d1[1], d1[0]},
		"event_id=" + ev2:          {d2[0]},
		"since=" + later.Add(-time.Minute).Format(time.RFC3339):                                {d4[0], d3[0]},
		"since=" + later.Add(-time.Minute).In(time.FixedZone("", 2*3600)).Format(time.RFC3339): {d4[0], d3[0]},
		"since=" + later.Add(time.Minute).Format(time.RFC3339):                                 nil,
		"endpoint_id=" + a + "&event_type=user.created":                                        {d4[0]},
	}
	for q, want := range cases {
		r := h.do(req{method: "GET", path: "/v1/deliveries?" + q})
		expectStatus(t, r, http.StatusOK)
		if got, _ := ids(t, r); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", q, got, want)
		}
	}

	// Pages of two, newest first, end with a null cursor.
	var seen []string
	for path := "/v1/deliveries?limit=2"; ; {
		page, next := ids(t, h.do(req{method: "GET", path: path}))
		seen = append(seen, page...)
		if next == "" {
			break
		}
		if len(seen) > len(all) {
			t.Fatal("pagination does not end")
		}
		path = "/v1/deliveries?limit=2&cursor=" + next
	}
	if !slices.Equal(seen, all) {
		t.Fatalf("pages %v, want %v", seen, all)
	}

	for q, field := range map[string]string{"status=failed": "status", "since=yesterday": "since",
		"since=2025-01-02": "since", "limit=0": "limit", "cursor=!": "cursor"} {
		r := h.do(req{method: "GET", path: "/v1/deliveries?" + q})
		expectStatus(t, r, http.StatusBadRequest)
		if e := r.json(t)["error"].(map[string]any); e["code"] != "validation_failed" || e["field"] != field {
			t.Errorf("%s: %s", q, r.body)
		}
	}

	other := h.newKey("other", storage.ProjectPlan{})
	if got, _ := ids(t, h.do(req{method: "GET", path: "/v1/deliveries", key: other})); len(got) != 0 {
		t.Fatalf("another project sees %v", got)
	}
}

func TestGetDeliveryWithAttempts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ep := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/a"})["id"].(string)
	ev, ds := h.send("order.created", ep)
	id := ds[0]

	r := h.do(req{method: "GET", path: "/v1/deliveries/" + id})
	expectStatus(t, r, http.StatusOK)
	d := r.json(t)
	expectKeys(t, d, slices.Concat(deliveryKeys, []string{"attempts"})...)
	if d["event_id"] != ev || d["endpoint_id"] != ep || d["status"] != "pending" || d["attempts_count"] != 0.0 ||
		d["next_attempt_at"] == nil || d["last_status_code"] != nil || d["last_error"] != nil || len(d["attempts"].([]any)) != 0 {
		t.Fatalf("fresh delivery %s", r.body)
	}

	next := h.clock.Now().Add(time.Minute)
	first := h.attempt(id, webhookd.Attempt{StatusCode: new(503), DurationMS: 12,
		RequestHeaders:  map[string]string{"X-Request-Id": "req_x", "Webhook-Id": ev},
		ResponseHeaders: map[string]string{"Content-Type": "text/plain"}, ResponseBody: "busy"},
		storage.Transition{Status: webhookd.DeliveryRetrying, NextAttemptAt: &next})
	h.clock.Advance(time.Minute)
	h.attempt(id, webhookd.Attempt{Error: new("connect: connection refused"), DurationMS: 3, Trigger: webhookd.TriggerManual},
		storage.Transition{Status: webhookd.DeliveryRetrying, NextAttemptAt: &next})

	r = h.do(req{method: "GET", path: "/v1/deliveries/" + id})
	expectStatus(t, r, http.StatusOK)
	d = r.json(t)
	if d["status"] != "retrying" || d["attempts_count"] != 2.0 || d["last_status_code"] != nil ||
		d["last_error"] != "connect: connection refused" {
		t.Fatalf("delivery after two attempts %s", r.body)
	}
	atts := d["attempts"].([]any)
	if len(atts) != 2 {
		t.Fatalf("attempts %s", r.body)
	}
	a1, a2 := atts[0].(map[string]any), atts[1].(map[string]any)
	expectKeys(t, a1, attemptKeys...)
	expectKeys(t, a2, attemptKeys...)
	started, err := time.Parse(time.RFC3339, a1["started_at"].(string))
	if a1["number"] != 1.0 || a1["request_id"] != first.RequestID || a1["url"] != "http://127.0.0.1:9/hook" ||
		a1["trigger"] != "auto" || a1["status_code"] != 503.0 || a1["error"] != nil || a1["duration_ms"] != 12.0 ||
		err != nil || !started.Equal(first.StartedAt.Truncate(time.Millisecond)) || a1["response_body"] != "busy" ||
		a1["request_headers"].(map[string]any)["Webhook-Id"] != ev ||
		a1["response_headers"].(map[string]any)["Content-Type"] != "text/plain" {
		t.Fatalf("first attempt %v", a1)
	}
	if a2["number"] != 2.0 || a2["trigger"] != "manual" || a2["status_code"] != nil ||
		a2["error"] != "connect: connection refused" || len(a2["response_headers"].(map[string]any)) != 0 {
		t.Fatalf("second attempt %v", a2)
	}

	expectStatus(t, h.do(req{method: "GET", path: "/v1/deliveries/dlv_nope"}), http.StatusNotFound)
	other := h.newKey("other", storage.ProjectPlan{})
	r = h.do(req{method: "GET", path: "/v1/deliveries/" + id, key: other})
	expectStatus(t, r, http.StatusNotFound)
	if r.errorCode(t) != "not_found" {
		t.Fatalf("another project's delivery: %s", r.body)
	}
}

// TestDeliveryShowsWaitingReason: a delivery that waits says why, read one
// by one and in the list; one that nothing holds back says null.
func TestDeliveryShowsWaitingReason(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ep := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/a"})["id"].(string)
	_, waiting := h.send("order.created", ep)
	_, due := h.send("order.created", ep)
	next := h.clock.Now().Add(30 * time.Second)
	if _, err := h.db.Pool().Exec(context.Background(), `UPDATE deliveries SET waiting_reason = 'circuit_open',
		next_attempt_at = $2 WHERE id = $1`, waiting[0], next); err != nil {
		t.Fatal(err)
	}

	r := h.do(req{method: "GET", path: "/v1/deliveries/" + waiting[0]})
	expectStatus(t, r, http.StatusOK)
	d := r.json(t)
	at, err := time.Parse(time.RFC3339, fmt.Sprint(d["next_attempt_at"]))
	if d["waiting_reason"] != "circuit_open" || err != nil || !at.Equal(next.Truncate(time.Millisecond)) {
		t.Fatalf("waiting delivery %s", r.body)
	}
	r = h.do(req{method: "GET", path: "/v1/deliveries/" + due[0]})
	expectStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.body), `"waiting_reason":null`) {
		t.Fatalf("due delivery, want waiting_reason null: %s", r.body)
	}

	r = h.do(req{method: "GET", path: "/v1/deliveries?endpoint_id=" + ep})
	expectStatus(t, r, http.StatusOK)
	got := map[string]any{}
	for _, item := range r.json(t)["data"].([]any) {
		item := item.(map[string]any)
		expectKeys(t, item, deliveryKeys...)
		got[item["id"].(string)] = item["waiting_reason"]
	}
	if got[waiting[0]] != "circuit_open" || got[due[0]] != nil || len(got) != 2 {
		t.Fatalf("list's waiting reasons %v: %s", got, r.body)
	}
}

func TestRedeliver(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, withEnqueuer(rec))
	ep := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/a"})["id"].(string)
	_, ds := h.send("order.created", ep)
	id := ds[0]
	h.deadLetter(id)
	path := "/v1/deliveries/" + id + "/redeliver"

	r := h.do(req{method: "POST", path: path})
	expectStatus(t, r, http.StatusBadRequest)
	if r.errorCode(t) != "idempotency_key_required" {
		t.Fatalf("without a key: %s", r.body)
	}
	for i, body := range []string{`{"now":true}`, `[]`, `"x"`, `{`} {
		expectStatus(t, h.do(req{method: "POST", path: path, body: body, idem: fmt.Sprint("bad", i)}), http.StatusBadRequest)
	}
	before := len(h.enqueued(rec))

	r = h.do(req{method: "POST", path: path, idem: "again"})
	expectStatus(t, r, http.StatusAccepted)
	d := r.json(t)
	expectKeys(t, d, deliveryKeys...)
	if d["id"] != id || d["status"] != "dead_letter" || d["next_attempt_at"] != nil || d["last_status_code"] != 500.0 ||
		d["last_error"] != nil || d["attempts_count"] != 1.0 {
		t.Fatalf("redeliver answered %s", r.body)
	}
	for _, k := range []string{"next_attempt_at", "waiting_reason", "last_error"} { // null, not omitted
		if !strings.Contains(string(r.body), `"`+k+`":null`) {
			t.Errorf("%s not null in %s", k, r.body)
		}
	}
	if got := h.enqueued(rec)[before:]; !slices.Equal(got, []string{"manual " + id + " api"}) {
		t.Fatalf("enqueued %v", got)
	}

	// The same key replays the answer and enqueues nothing more; {} is as good as empty.
	rr := h.do(req{method: "POST", path: path, idem: "again"})
	expectStatus(t, rr, http.StatusAccepted)
	if rr.header.Get("Idempotent-Replayed") != "true" || len(h.enqueued(rec)) != before+1 {
		t.Fatalf("replay: %v %v", rr.header, h.enqueued(rec))
	}
	expectStatus(t, h.do(req{method: "POST", path: path, body: "{}", idem: "third"}), http.StatusAccepted)
	if len(h.enqueued(rec)) != before+2 {
		t.Fatalf("enqueued %v", h.enqueued(rec))
	}

	other := h.newKey("other", storage.ProjectPlan{})
	r = h.do(req{method: "POST", path: path, key: other, idem: "x"})
	expectStatus(t, r, http.StatusNotFound)
	expectStatus(t, h.do(req{method: "POST", path: "/v1/deliveries/dlv_nope/redeliver", idem: "y"}), http.StatusNotFound)
	if len(h.enqueued(rec)) != before+2 {
		t.Fatalf("404s enqueued %v", h.enqueued(rec))
	}

	// A queue that cannot take the attempt does not lose it: the request is
	// recorded in PostgreSQL for the reconciler.
	broken := h.newServer(withEnqueuer(&recorder{err: errors.New("redis: connection refused")}))
	r = h.do(req{method: "POST", path: path, idem: "down", server: broken})
	expectStatus(t, r, http.StatusAccepted)
	pending, err := h.db.Store().PendingRedeliveries(context.Background(), "", 10)
	if err != nil || len(pending) != 1 || pending[0].DeliveryID != id || pending[0].By != "api" {
		t.Fatalf("pending redeliveries %v (%v)", pending, err)
	}
}

// TestRedeliverToDisabledEndpoint: a redelivery to a disabled endpoint is
// refused with 409 endpoint_disabled, records nothing and enqueues nothing;
// enabled again, it is accepted.
func TestRedeliverToDisabledEndpoint(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, withEnqueuer(rec))
	ep := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/a"})["id"].(string)
	_, ds := h.send("order.created", ep)
	h.deadLetter(ds[0])
	path := "/v1/deliveries/" + ds[0] + "/redeliver"
	expectStatus(t, h.do(req{method: "PATCH", path: "/v1/endpoints/" + ep, body: `{"status":"disabled"}`}), http.StatusOK)
	before := len(h.enqueued(rec))
	r := h.do(req{method: "POST", path: path, idem: "off"})
	expectStatus(t, r, http.StatusConflict)
	if r.errorCode(t) != "endpoint_disabled" {
		t.Fatalf("redeliver to a disabled endpoint: %s", r.body)
	}
	pending, err := h.db.Store().PendingRedeliveries(context.Background(), "", 10)
	if err != nil || len(pending) != 0 || len(h.enqueued(rec)) != before {
		t.Fatalf("a refused redelivery left %v pending (%v), enqueued %v", pending, err, h.enqueued(rec)[before:])
	}
	expectStatus(t, h.do(req{method: "PATCH", path: "/v1/endpoints/" + ep, body: `{"status":"active"}`}), http.StatusOK)
	expectStatus(t, h.do(req{method: "POST", path: path, idem: "on"}), http.StatusAccepted)
}

func TestTestEndpoint(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, withEnqueuer(rec))
	target := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/a", "event_types": []string{"order.created"}})["id"].(string)
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/all"}) // subscribed to every type
	path := "/v1/endpoints/" + target + "/test"

	for _, body := range []any{nil, "{}", `{"data":{"hello":"world"}}`} {
		before := len(h.enqueued(rec))
		r := h.do(req{method: "POST", path: path, body: body})
		expectStatus(t, r, http.StatusAccepted)
		d := r.json(t)
		expectKeys(t, d, deliveryKeys...)
		if d["endpoint_id"] != target || d["event_type"] != "webhookd.test" || d["status"] != "pending" ||
			!strings.HasPrefix(d["id"].(string), "dlv_") || d["last_status_code"] != nil {
			t.Fatalf("test delivery %s", r.body)
		}
		ev := h.do(req{method: "GET", path: "/v1/events/" + d["event_id"].(string)}).json(t)
		dels := ev["deliveries"].([]any)
		if ev["type"] != "webhookd.test" || len(dels) != 1 || dels[0].(map[string]any)["id"] != d["id"] {
			t.Fatalf("test event %v", ev)
		}
		data := ev["data"].(map[string]any)
		if body == `{"data":{"hello":"world"}}` && data["hello"] != "world" ||
			body != `{"data":{"hello":"world"}}` && data["message"] == nil {
			t.Fatalf("%v: data %v", body, data)
		}
		if got := h.enqueued(rec)[before:]; !slices.Equal(got, []string{"auto " + d["id"].(string)}) {
			t.Fatalf("enqueued %v", got)
		}
	}

	r := h.do(req{method: "POST", path: path, body: `{"type":"x"}`})
	expectStatus(t, r, http.StatusBadRequest)
	if f := r.json(t)["error"].(map[string]any)["field"]; f != "type" {
		t.Fatalf("unknown field: %s", r.body)
	}
	expectStatus(t, h.do(req{method: "POST", path: "/v1/endpoints/ep_nope/test"}), http.StatusNotFound)
	expectStatus(t, h.do(req{method: "POST", path: path, key: h.newKey("other", storage.ProjectPlan{})}), http.StatusNotFound)

	expectStatus(t, h.do(req{method: "PATCH", path: "/v1/endpoints/" + target, body: `{"status":"disabled"}`}), http.StatusOK)
	events := h.count("events")
	r = h.do(req{method: "POST", path: path})
	expectStatus(t, r, http.StatusBadRequest)
	if e := r.json(t)["error"].(map[string]any); e["code"] != "validation_failed" || e["field"] != "endpoint" {
		t.Fatalf("disabled endpoint: %s", r.body)
	}
	if h.count("events") != events {
		t.Fatal("a test of a disabled endpoint made an event")
	}
}
