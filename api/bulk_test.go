package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/bulk"
)

// bulkBody is n NDJSON lines of type "bulk.item", data {"n":i} for line i.
func bulkBody(n int, line func(i int) string) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		s := ""
		if line != nil {
			s = line(i)
		}
		if s == "" {
			s = fmt.Sprintf(`{"type":"bulk.item","data":{"n":%d}}`, i)
		}
		b.WriteString(s + "\n")
	}
	return b.Bytes()
}

// postBulk posts body to /v1/events/bulk and returns the job id of its 202.
func (h *harness) postBulk(body []byte, idem string) string {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/v1/events/bulk", body: body, idem: idem,
		header: map[string]string{"Content-Type": "application/x-ndjson"}})
	expectStatus(h.t, r, http.StatusAccepted)
	id, _ := r.json(h.t)["job_id"].(string)
	if !strings.HasPrefix(id, "job_") || r.header.Get("Location") != "/v1/jobs/"+id {
		h.t.Fatalf("job_id %q, Location %q", id, r.header.Get("Location"))
	}
	return id
}

// runner is a bulk job runner on h's database; enqueue, when set, is
// called after each chunk's commit with the deliveries it made.
func (h *harness) runner(enqueue func(n int)) *bulk.Runner {
	return &bulk.Runner{DB: h.db, Check: api.NewLineChecker(h.db, 0).Check, Enqueuer: &chunkHook{rec: &recorder{}, hook: enqueue}}
}

type chunkHook struct {
	rec  *recorder
	hook func(n int)
}

func (c *chunkHook) Enqueue(ctx context.Context, ds ...webhookd.ScheduledDelivery) error {
	if c.hook != nil {
		c.hook(len(ds))
	}
	return c.rec.Enqueue(ctx, ds...)
}
func (c *chunkHook) EnqueueManual(context.Context, string, string, string) error { return nil }
func (c *chunkHook) EnqueueJob(context.Context, string) error                    { return nil }

func (h *harness) job(id string) map[string]any {
	h.t.Helper()
	r := h.do(req{method: "GET", path: "/v1/jobs/" + id})
	expectStatus(h.t, r, http.StatusOK)
	return r.json(h.t)
}

// eventNumbers returns data.n of every event of type bulk.item, in the
// order they were written.
func (h *harness) eventNumbers() []int {
	h.t.Helper()
	rows, err := h.db.Pool().Query(context.Background(), `SELECT (data->>'n')::int FROM events WHERE type = 'bulk.item' ORDER BY id`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

func TestBulkAcceptsLinesInOrderAndListsRefusedOnes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	// An event that takes external id "taken" before the job runs.
	r := h.do(req{method: "POST", path: "/v1/events", idem: uuid.NewString(),
		body: map[string]any{"type": "other", "data": 1, "external_id": "taken"}})
	expectStatus(t, r, http.StatusAccepted)

	const n = 3000
	bad := map[int]string{ // line → the code it is refused with
		7:    "validation_failed", // no type
		1500: "external_id_taken", // taken before
		2001: "external_id_taken", // taken by line 2000
		2999: "validation_failed", // unknown endpoint
		11:   "external_id_taken", // taken by line 10, in the same chunk
		12:   "external_id_taken", // and again
	}
	body := bulkBody(n, func(i int) string {
		switch i {
		case 7:
			return `{"data":{"n":7}}`
		case 1500:
			return `{"type":"bulk.item","data":{"n":1500},"external_id":"taken"}`
		case 10, 11, 12:
			return fmt.Sprintf(`{"type":"bulk.item","data":{"n":%d},"external_id":"dup"}`, i)
		case 2000, 2001:
			return fmt.Sprintf(`{"type":"bulk.item","data":{"n":%d},"external_id":"x2000"}`, i)
		case 2999:
			return `{"type":"bulk.item","data":{"n":2999},"endpoint_ids":["ep_nope"]}`
		case 42:
			return "   " // blank: skipped, still numbered
		}
		return ""
	})
	id := h.postBulk(body, uuid.NewString())
	if j := h.job(id); j["kind"] != "event_bulk" || j["status"] != "queued" || j["total"] != float64(n-1) {
		t.Fatalf("new job %v", j)
	}
	var deliveries int
	var mu sync.Mutex
	if err := h.runner(func(d int) { mu.Lock(); deliveries += d; mu.Unlock() }).Run(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	j := h.job(id)
	if j["status"] != "succeeded" || j["done"] != float64(n-1-len(bad)) || j["failed_count"] != float64(len(bad)) ||
		j["finished_at"] == nil {
		t.Fatalf("finished job %v", j)
	}
	got := h.eventNumbers()
	if len(got) != n-1-len(bad) || deliveries != len(got) {
		t.Fatalf("%d events, %d deliveries enqueued; want %d", len(got), deliveries, n-1-len(bad))
	}
	want := 1
	for _, g := range got {
		for bad[want] != "" || want == 42 {
			want++
		}
		if g != want {
			t.Fatalf("events out of order: line %d where line %d was due", g, want)
		}
		want++
	}
	if c := h.count("bulk_chunks"); c != 0 {
		t.Fatalf("%d chunks kept after the job", c)
	}

	r = h.do(req{method: "GET", path: "/v1/jobs/" + id + "/errors"})
	expectStatus(t, r, http.StatusOK)
	if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("Content-Type %q", ct)
	}
	lines := bytes.Split(bytes.TrimSpace(r.body), []byte("\n"))
	if len(lines) != len(bad) {
		t.Fatalf("%d errors listed:\n%s", len(lines), r.body)
	}
	prev := 0
	for _, l := range lines {
		var e struct {
			Line    int     `json:"line"`
			Code    string  `json:"code"`
			Message string  `json:"message"`
			Field   *string `json:"field"`
		}
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatal(err)
		}
		if e.Line <= prev || bad[e.Line] != e.Code || e.Message == "" || e.Field == nil {
			t.Fatalf("error %s; want line %d's code %q, in order, with a field", l, e.Line, bad[e.Line])
		}
		prev = e.Line
	}
	expectStatus(t, h.do(req{method: "GET", path: "/v1/jobs/job_nope/errors"}), http.StatusNotFound)
}

func TestBulkRefusesBadBodiesBeforeStoringAnything(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.MaxBulkEvents = 50; c.MaxBulkBytes = 4096 })
	for _, tc := range []struct {
		name, body, code, message string
		status                    int
	}{
		{"not JSON", `{"type":"a","data":1}` + "\n" + `{"type":"a","data":1}` + "\n" + `{"type":` + "\n",
			"invalid_json", "line 3", http.StatusBadRequest},
		{"not UTF-8", `{"type":"a","data":1}` + "\n" + "{\"type\":\"a\",\"data\":\"\xff\"}\n",
			"invalid_json", "line 2", http.StatusBadRequest},
		{"empty", "\n\n", "validation_failed", "at least one event", http.StatusBadRequest},
		{"too many events", string(bulkBody(51, nil)), "payload_too_large", "50 events", http.StatusRequestEntityTooLarge},
		{"too many bytes", strings.Repeat(" ", 4097) + "\n", "payload_too_large", "4096 bytes", http.StatusRequestEntityTooLarge},
	} {
		r := h.do(req{method: "POST", path: "/v1/events/bulk", body: tc.body, idem: uuid.NewString()})
		if r.status != tc.status || r.errorCode(t) != tc.code || !strings.Contains(string(r.body), tc.message) {
			t.Errorf("%s: %d %s; want %d %s naming %q", tc.name, r.status, r.body, tc.status, tc.code, tc.message)
		}
	}
	// A body streamed without a length, over the limit.
	hr, _ := http.NewRequest("POST", h.srv.URL+"/v1/events/bulk", struct{ *bytes.Reader }{bytes.NewReader(bulkBody(200, nil))})
	hr.Header.Set("Authorization", "Bearer "+h.key)
	hr.Header.Set("Idempotency-Key", uuid.NewString())
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked body over the limit: %d", resp.StatusCode)
	}
	if j, c := h.count("jobs"), h.count("bulk_chunks"); j != 0 || c != 0 {
		t.Fatalf("%d jobs and %d chunks stored by refused bodies", j, c)
	}
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events/bulk", body: bulkBody(1, nil)}), http.StatusBadRequest)
}

func TestBulkIdempotencyKeyCoversTheJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := uuid.NewString()
	body := bulkBody(2500, nil)
	id := h.postBulk(body, key)
	r := h.do(req{method: "POST", path: "/v1/events/bulk", body: body, idem: key})
	expectStatus(t, r, http.StatusAccepted)
	if r.json(t)["job_id"] != id || r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("Location") != "/v1/jobs/"+id {
		t.Fatalf("repeat: %s %v", r.body, r.header)
	}
	r = h.do(req{method: "POST", path: "/v1/events/bulk", body: bulkBody(3, nil), idem: key})
	if r.status != http.StatusUnprocessableEntity || r.errorCode(t) != "idempotency_key_mismatch" {
		t.Fatalf("another body under the key: %d %s", r.status, r.body)
	}
	if n := h.count("jobs"); n != 1 {
		t.Fatalf("%d jobs", n)
	}
	// A refused body is remembered for its key, as on the other routes.
	bad := []byte("{\n")
	key = uuid.NewString()
	first := h.do(req{method: "POST", path: "/v1/events/bulk", body: bad, idem: key})
	again := h.do(req{method: "POST", path: "/v1/events/bulk", body: bad, idem: key})
	if first.status != http.StatusBadRequest || again.status != http.StatusBadRequest || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("refused body: %d, then %d %v", first.status, again.status, again.header)
	}
}

func TestBulkJobResumesWithNoLineTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	const n = 4500
	id := h.postBulk(bulkBody(n, nil), uuid.NewString())
	// The first run is cut off after its second chunk's commit, as a
	// worker killed mid-job would be.
	ctx, cancel := context.WithCancel(context.Background())
	chunks := 0
	err := h.runner(func(int) {
		if chunks++; chunks == 2 {
			cancel()
		}
	}).Run(ctx, id)
	if err == nil {
		t.Fatal("the cut-off run ended without an error")
	}
	j := h.job(id)
	if j["status"] != "running" || j["done"] != float64(2000) {
		t.Fatalf("after the cut: %v", j)
	}
	if err := h.runner(nil).Run(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if j := h.job(id); j["status"] != "succeeded" || j["done"] != float64(n) || j["failed_count"] != float64(0) {
		t.Fatalf("after the resume: %v", j)
	}
	got := h.eventNumbers()
	if len(got) != n {
		t.Fatalf("%d events for %d lines", len(got), n)
	}
	for i, g := range got {
		if g != i+1 {
			t.Fatalf("event %d is line %d", i+1, g)
		}
	}
}

func TestBulkCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"}) // the runner's hook runs on a chunk's deliveries
	cancelJob := func(id string) map[string]any {
		t.Helper()
		r := h.do(req{method: "POST", path: "/v1/jobs/" + id + "/cancel", idem: uuid.NewString()})
		expectStatus(t, r, http.StatusOK)
		return r.json(t)
	}

	// Canceled while running: no line after the answer.
	id := h.postBulk(bulkBody(3000, nil), uuid.NewString())
	var answer map[string]any
	err := h.runner(func(int) {
		if answer == nil {
			answer = cancelJob(id)
		}
	}).Run(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if answer["status"] != "canceled" || answer["finished_at"] == nil || answer["done"] != float64(1000) {
		t.Fatalf("cancel answered %v", answer)
	}
	if got := len(h.eventNumbers()); got != 1000 {
		t.Fatalf("%d events after a cancel answered at 1000", got)
	}
	if j := h.job(id); j["status"] != "canceled" || j["done"] != float64(1000) {
		t.Fatalf("canceled job %v", j)
	}

	// Canceled while queued: the runner does nothing.
	queued := h.postBulk(bulkBody(10, nil), uuid.NewString())
	if j := cancelJob(queued); j["status"] != "canceled" {
		t.Fatalf("queued job after cancel: %v", j)
	}
	if err := h.runner(nil).Run(context.Background(), queued); err != nil {
		t.Fatal(err)
	}
	if got := len(h.eventNumbers()); got != 1000 {
		t.Fatalf("a canceled queued job wrote events: %d", got)
	}

	// Finished: unchanged.
	done := h.postBulk(bulkBody(10, nil), uuid.NewString())
	if err := h.runner(nil).Run(context.Background(), done); err != nil {
		t.Fatal(err)
	}
	if j := cancelJob(done); j["status"] != "succeeded" || j["done"] != float64(10) {
		t.Fatalf("finished job after cancel: %v", j)
	}
	expectStatus(t, h.do(req{method: "POST", path: "/v1/jobs/job_nope/cancel", idem: uuid.NewString()}), http.StatusNotFound)
}
