package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/storage"
)

// fuzzer drives the real API handler (api.Server on the harness's own
// PostgreSQL schema and Redis database) with fuzzed requests. Requests go
// to ServeHTTP directly, so a fuzzed method, path or query reaches the
// handler as it is, and an iteration costs no TCP round trip.
type fuzzer struct {
	*harness
	api http.Handler
}

// newFuzzer sets up once per fuzzing process; the project's rate limit is
// out of reach, so iterations are refused for what they send, not for
// their pace.
func newFuzzer(f *testing.F) *fuzzer {
	h := newHarness(f)
	h.key = h.newKey("fuzz", storage.ProjectPlan{RateLimitPerMinute: 1 << 30})
	s, err := api.New(api.Config{DB: h.db, Redis: h.redis, Clock: h.clock, AllowPrivateNetworks: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: prometheus.NewRegistry()})
	if err != nil {
		f.Fatal(err)
	}
	return &fuzzer{harness: h, api: s}
}

// fuzzReq is one fuzzed request. scheme "" sends no Authorization; idem ""
// no Idempotency-Key.
type fuzzReq struct {
	method, path, query string
	body                []byte
	scheme, idem        string
	header              map[string]string
}

// serve runs one request through the handler.
func (fz *fuzzer) serve(t *testing.T, q fuzzReq) response {
	t.Helper()
	r := &http.Request{Method: q.method, URL: &url.URL{Path: q.path, RawQuery: q.query}, Proto: "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, Host: "api.example", RemoteAddr: "192.0.2.1:1234",
		Body: io.NopCloser(bytes.NewReader(q.body)), ContentLength: int64(len(q.body))}
	r.RequestURI = r.URL.RequestURI()
	if q.scheme != "" {
		r.Header.Set("Authorization", q.scheme+" "+fz.key)
	}
	if q.idem != "" {
		r.Header.Set("Idempotency-Key", q.idem)
	}
	for k, v := range q.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	fz.api.ServeHTTP(w, r.WithContext(context.Background()))
	return response{status: w.Code, header: w.Header(), body: w.Body.Bytes()}
}

// get reads path with the fuzz project's key and wants 200.
func (fz *fuzzer) get(t *testing.T, path string) response {
	t.Helper()
	r := fz.serve(t, fuzzReq{method: "GET", path: path, scheme: "Bearer"})
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	return r
}

// rows counts what a request can create.
type rows struct{ events, endpoints, deliveries, idempotency, jobs, attempts, deadLetters int }

func (h *harness) rows(t testing.TB) rows {
	t.Helper()
	var n rows
	err := h.db.Pool().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM endpoints),
		(SELECT count(*) FROM deliveries), (SELECT count(*) FROM idempotency_records), (SELECT count(*) FROM jobs),
		(SELECT count(*) FROM attempts), (SELECT count(*) FROM dead_letters)`).
		Scan(&n.events, &n.endpoints, &n.deliveries, &n.idempotency, &n.jobs, &n.attempts, &n.deadLetters)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// statusOfCode is SPEC §2's status of every error code.
var statusOfCode = map[string]int{"unauthorized": 401, "not_found": 404, "method_not_allowed": 405,
	"invalid_json": 400, "validation_failed": 400, "idempotency_key_required": 400, "idempotency_key_too_long": 400,
	"idempotency_key_mismatch": 422, "idempotency_key_in_progress": 409, "external_id_taken": 409,
	"endpoint_disabled": 409, "version_mismatch": 412, "payload_too_large": 413, "rate_limited": 429}

// apiError is a decoded error answer.
type apiError struct {
	Code, Message, RequestID, Field, ExistingID string
}

// check holds the properties every answer has: no 5xx, and a 4xx in the
// SPEC's error shape whose code fits its status, whose request_id is the
// X-Request-Id (unless replayed), and whose field, for validation_failed, fieldOK accepts.
// It returns the error of a 4xx, a pseudo-error coded "redirect" for the
// mux's redirect, and nil for a 2xx.
func check(t *testing.T, q fuzzReq, r response, fieldOK func(field string) bool) *apiError {
	t.Helper()
	if r.status >= 500 {
		t.Fatalf("%s %s?%s (body %q): %d %s", q.method, q.path, q.query, q.body, r.status, r.body)
	}
	if r.status >= 300 && r.status < 400 { // ServeMux sends an unclean path (//, /./, /../) to its clean form
		if (r.status != http.StatusMovedPermanently && r.status != http.StatusTemporaryRedirect) || r.header.Get("Location") == "" {
			t.Fatalf("%d answer (Location %q): %s", r.status, r.header.Get("Location"), r.body)
		}
		return &apiError{Code: "redirect"}
	}
	if r.status < 400 {
		return nil
	}
	var body struct {
		Error *struct {
			Code       string `json:"code"`
			Message    string `json:"message"`
			RequestID  string `json:"request_id"`
			Field      string `json:"field"`
			ExistingID string `json:"existing_id"`
		} `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.Error == nil {
		t.Fatalf("%d answer is not the SPEC error shape (%v): %s", r.status, err, r.body)
	}
	e := body.Error
	if want, ok := statusOfCode[e.Code]; !ok || want != r.status {
		t.Fatalf("code %q with status %d: %s", e.Code, r.status, r.body)
	}
	replayed := r.header.Get("Idempotent-Replayed") == "true" // the first answer, byte for byte
	if e.Message == "" || !strings.HasPrefix(e.RequestID, "req_") || (e.RequestID != r.header.Get("X-Request-Id") && !replayed) {
		t.Fatalf("error without message or matching request_id: %s (X-Request-Id %q)", r.body, r.header.Get("X-Request-Id"))
	}
	if r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("error Content-Type %q", r.header.Get("Content-Type"))
	}
	switch e.Code {
	case "validation_failed":
		if e.Field == "" || !fieldOK(e.Field) {
			t.Fatalf("validation_failed names field %q: %s (request body %q, query %q)", e.Field, r.body, q.body, q.query)
		}
	case "method_not_allowed":
		if r.header.Get("Allow") == "" {
			t.Fatalf("405 without Allow")
		}
	case "external_id_taken":
		if !strings.HasPrefix(e.ExistingID, "evt_") {
			t.Fatalf("external_id_taken without existing_id: %s", r.body)
		}
	}
	return &apiError{Code: e.Code, Message: e.Message, RequestID: e.RequestID, Field: e.Field, ExistingID: e.ExistingID}
}

// refused holds a refusal's property: it created nothing, but the
// idempotency record SPEC §2 keeps for a 4xx (not 429) that passed the
// key checks; a repeat then replays that answer byte for byte.
func (fz *fuzzer) refused(t *testing.T, q fuzzReq, r response, before rows) {
	t.Helper()
	after := fz.rows(t)
	recorded := after.idempotency - before.idempotency
	after.idempotency = before.idempotency
	if after != before || recorded < 0 || recorded > 1 {
		t.Fatalf("refused %d changed the database: %+v, before %+v (records +%d)", r.status, after, before, recorded)
	}
	if recorded == 1 {
		again := fz.serve(t, q)
		if again.status != r.status || !bytes.Equal(again.body, r.body) || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the remembered %d replays as %d %s (headers %v)", r.status, again.status, again.body, again.header)
		}
	}
}

// topKeys are the keys of a JSON object body.
func topKeys(body []byte) map[string]bool {
	var m map[string]json.RawMessage
	json.Unmarshal(body, &m)
	keys := map[string]bool{}
	for k := range m {
		keys[k] = true
	}
	return keys
}

// fieldIn accepts the named fields, fields matching an indexed pattern
// (like event_types[3]), and unknown fields that are keys of the body.
func fieldIn(body []byte, known ...string) func(string) bool {
	return func(f string) bool {
		base, _, _ := strings.Cut(f, "[")
		for _, k := range known {
			if f == k || base == k {
				return true
			}
		}
		return topKeys(body)[f] || (f == `""` && topKeys(body)[""])
	}
}

var batchField = regexp.MustCompile(`^events\[(\d+)\]\.(.*)$`)

// jsonEqual compares two JSON documents by value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// compact is raw without insignificant white space.
func compact(t *testing.T, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %q: %v", raw, err)
	}
	return b.Bytes()
}
