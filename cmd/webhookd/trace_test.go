package main

import (
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/webhookd/webhookd/internal/testenv"
)

// exportedSpan is a span as a collector received it.
type exportedSpan struct {
	name, traceID, spanID, parentID string
}

// collector is a loopback OTLP/HTTP trace receiver: it decodes each
// ExportTraceServiceRequest and keeps its spans.
type collector struct {
	*httptest.Server
	mu    sync.Mutex
	spans []exportedSpan
	posts int
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		raw, err := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(raw, &req)
		}
		if r.URL.Path != "/v1/traces" || err != nil {
			t.Errorf("collector: %s %s: %v", r.Method, r.URL.Path, err)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.posts++
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					c.spans = append(c.spans, exportedSpan{name: s.GetName(), traceID: hex.EncodeToString(s.GetTraceId()),
						spanID: hex.EncodeToString(s.GetSpanId()), parentID: hex.EncodeToString(s.GetParentSpanId())})
				}
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(c.Close)
	return c
}

// inTrace returns the spans received of trace id.
func (c *collector) inTrace(id string) []exportedSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []exportedSpan
	for _, s := range c.spans {
		if s.traceID == id {
			out = append(out, s)
		}
	}
	return out
}

func (c *collector) received() (posts, spans int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.posts, len(c.spans)
}

// hookReceiver is a loopback receiver that fails the first failFirst
// requests with 500 and keeps the traceparent of each request.
type hookReceiver struct {
	*httptest.Server
	mu           sync.Mutex
	traceparents []string
}

func newHookReceiver(t *testing.T, failFirst int) *hookReceiver {
	rc := &hookReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		rc.mu.Lock()
		rc.traceparents = append(rc.traceparents, r.Header.Get("traceparent"))
		n := len(rc.traceparents)
		rc.mu.Unlock()
		if n <= failFirst {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *hookReceiver) got() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.traceparents...)
}

// traceRun is a `webhookd all` process on a schema and Redis database of
// its own, with an API key.
type traceRun struct {
	t    *testing.T
	proc *proc
	api  string
	key  string
}

// otelUnset empties every variable that could turn tracing on or point
// it elsewhere, whatever the test's own environment holds.
var otelUnset = []string{"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_TRACES_EXPORTER=",
	"OTEL_SDK_DISABLED=", "OTEL_EXPORTER_OTLP_PROTOCOL=", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_TRACES_SAMPLER="}

func startTraceRun(t *testing.T, env ...string) *traceRun {
	t.Helper()
	_, key, _, dbURL := projectDB(t, "trace")
	_, redisURL := testenv.Redis(t)
	addr := "127.0.0.1:" + freePort(t)
	p := startProcess(t, "all", dbURL, redisURL, append(append([]string{"WEBHOOKD_API_ADDR=" + addr,
		"WEBHOOKD_RETRY_SCHEDULE=1s,1s,1s"}, otelUnset...), env...)...)
	r := &traceRun{t: t, proc: p, api: "http://" + addr, key: key}
	waitFor(t, 20*time.Second, "webhookd all answering on "+addr, func() bool {
		resp, err := http.Get(r.api + "/v1/openapi.json")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	return r
}

// call sends a request to the API, with an Idempotency-Key for a POST and
// the header given, and decodes the answer, failing the test unless it is
// wantStatus.
func (r *traceRun) call(method, path, body string, header map[string]string, wantStatus int) map[string]any {
	r.t.Helper()
	req, err := http.NewRequest(method, r.api+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+r.key)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", uuid.NewString())
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != wantStatus {
		r.t.Fatalf("%s %s: %d %v (%v), want %d", method, path, resp.StatusCode, out, err, wantStatus)
	}
	return out
}

// deliver posts one event (with the header given) to two endpoints, the
// first failing once, and waits until both deliveries have succeeded; it
// returns their attempts.
func (r *traceRun) deliver(flaky, steady *hookReceiver, header map[string]string) []map[string]any {
	r.t.Helper()
	r.call("POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q}`, flaky.URL+"/hook"), nil, http.StatusCreated)
	r.call("POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q}`, steady.URL+"/hook"), nil, http.StatusCreated)
	ev := r.call("POST", "/v1/events", `{"type":"trace.test","data":{"n":1}}`, header, http.StatusAccepted)
	var attempts []map[string]any
	for _, x := range ev["deliveries"].([]any) {
		id := x.(map[string]any)["id"].(string)
		var d map[string]any
		waitFor(r.t, 30*time.Second, "delivery "+id+" succeeded", func() bool {
			d = r.call("GET", "/v1/deliveries/"+id, "", nil, http.StatusOK)
			return d["status"] == "succeeded"
		})
		for _, a := range d["attempts"].([]any) {
			attempts = append(attempts, a.(map[string]any))
		}
	}
	if len(attempts) != 3 {
		r.t.Fatalf("%d attempts, want 3 (one failure, two successes)", len(attempts))
	}
	return attempts
}

// attemptLogLines are the worker's "delivery attempt" log lines, decoded.
func (r *traceRun) attemptLogLines() []map[string]any {
	var out []map[string]any
	for line := range strings.SplitSeq(r.proc.logs.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "delivery attempt" {
			out = append(out, l)
		}
	}
	return out
}

// TestTraceOfOneEventAcrossTheHop (issue 37's target): a real `webhookd
// all` exporting to a loopback OTLP/HTTP collector is sent one event, with
// the caller's traceparent, to two endpoints, one failing once. The trace
// holds 1 API span, 1 write span and 3 attempt spans, each the child of
// the one before it (the attempts all of the write); each receiver's
// traceparent names its attempt's span as its parent; the API's attempts
// and the attempt log lines carry the trace's id.
func TestTraceOfOneEventAcrossTheHop(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	r := startTraceRun(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL, "OTEL_BSP_SCHEDULE_DELAY=100")
	flaky, steady := newHookReceiver(t, 1), newHookReceiver(t, 0)
	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	attempts := r.deliver(flaky, steady, map[string]string{"traceparent": "00-" + traceID + "-" + callerSpan + "-01"})

	var spans []exportedSpan
	count := func(name string) int {
		n := 0
		for _, s := range spans {
			if s.name == name {
				n++
			}
		}
		return n
	}
	waitFor(t, 20*time.Second, "the event's five spans at the collector", func() bool {
		spans = col.inTrace(traceID)
		return count("POST /v1/events") == 1 && count("webhookd.event.write") == 1 && count("webhookd.attempt") == 3
	})
	if len(spans) != 5 {
		t.Fatalf("trace %s holds %d spans, want 5: %+v", traceID, len(spans), spans)
	}
	byName := map[string][]exportedSpan{}
	for _, s := range spans {
		byName[s.name] = append(byName[s.name], s)
	}
	apiSpan, write := byName["POST /v1/events"][0], byName["webhookd.event.write"][0]
	if apiSpan.parentID != callerSpan {
		t.Errorf("the API span's parent is %s, want the caller's %s", apiSpan.parentID, callerSpan)
	}
	if write.parentID != apiSpan.spanID {
		t.Errorf("the write span's parent is %s, want the API span %s", write.parentID, apiSpan.spanID)
	}
	attemptSpans := map[string]bool{}
	for _, s := range byName["webhookd.attempt"] {
		attemptSpans[s.spanID] = true
		if s.parentID != write.spanID {
			t.Errorf("attempt span %s's parent is %s, want the write span %s", s.spanID, s.parentID, write.spanID)
		}
	}

	sent := append(flaky.got(), steady.got()...)
	if len(flaky.got()) != 2 || len(sent) != 3 {
		t.Fatalf("receivers got %d and %d requests, want 2 and 1", len(flaky.got()), len(steady.got()))
	}
	for _, tp := range sent {
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != traceID || !attemptSpans[parts[2]] {
			t.Errorf("a receiver got traceparent %q, want trace %s with an attempt's span as parent", tp, traceID)
			continue
		}
		delete(attemptSpans, parts[2]) // each attempt's span once
	}
	for _, a := range attempts {
		if a["trace_id"] != traceID {
			t.Errorf("attempt %v #%v has trace_id %v, want %s", a["request_id"], a["number"], a["trace_id"], traceID)
		}
	}
	// An attempt's log line is written once its record lands, after its
	// span ended and its receiver answered.
	var lines []map[string]any
	waitFor(t, 10*time.Second, "three attempt log lines", func() bool {
		lines = r.attemptLogLines()
		return len(lines) >= 3
	})
	for _, l := range lines {
		if l["trace_id"] != traceID || l["span_id"] == nil {
			t.Errorf("attempt log line with trace_id %v span_id %v", l["trace_id"], l["span_id"])
		}
	}
	if len(lines) != 3 {
		t.Errorf("%d attempt log lines, want 3", len(lines))
	}
}

// TestNoTracingWithoutOTELVariables: with no OTEL_* variable set, or with
// OTEL_TRACES_EXPORTER=none beside an endpoint, webhookd sends receivers
// no traceparent (even when its caller sent one), records no trace id,
// logs none, and exports nothing, not even at its shutdown.
func TestNoTracingWithoutOTELVariables(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  func(col *collector) []string
	}{
		{"unset", func(*collector) []string { return nil }},
		{"exporter none", func(col *collector) []string {
			return []string{"OTEL_TRACES_EXPORTER=none", "OTEL_EXPORTER_OTLP_ENDPOINT=" + col.URL, "OTEL_BSP_SCHEDULE_DELAY=100"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			col := newCollector(t)
			r := startTraceRun(t, tc.env(col)...)
			flaky, steady := newHookReceiver(t, 1), newHookReceiver(t, 0)
			attempts := r.deliver(flaky, steady,
				map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
			for _, tp := range append(flaky.got(), steady.got()...) {
				if tp != "" {
					t.Errorf("a receiver got traceparent %q with tracing off", tp)
				}
			}
			for _, a := range attempts {
				if a["trace_id"] != nil {
					t.Errorf("attempt has trace_id %v with tracing off", a["trace_id"])
				}
			}
			for _, l := range r.attemptLogLines() {
				if _, ok := l["trace_id"]; ok {
					t.Errorf("attempt log line with trace_id %v with tracing off", l["trace_id"])
				}
			}
			if strings.Contains(r.proc.logs.String(), "tracing on") {
				t.Errorf("the log says tracing is on")
			}
			// A graceful stop would send any span still waiting.
			r.proc.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.proc.exited:
			case <-time.After(30 * time.Second):
				t.Fatal("webhookd all did not stop within 30s of SIGTERM")
			}
			if posts, spans := col.received(); posts != 0 || spans != 0 {
				t.Errorf("the collector got %d exports (%d spans) with tracing off", posts, spans)
			}
		})
	}
}

// TestBadOTELSettingStopsTheStart: an OTEL_* setting webhookd cannot
// honour (another exporter, OTLP over gRPC) stops the start with exit 2,
// naming the variable, before anything is opened.
func TestBadOTELSettingStopsTheStart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		vars map[string]string
		says string
	}{
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER: "},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			"OTEL_EXPORTER_OTLP_PROTOCOL: "},
	} {
		for _, cmd := range []string{"all", "serve", "worker"} {
			out, errOut, code := cliRun(c.vars, cmd)
			if code != 2 || out != "" || strings.Count(errOut, c.says) != 1 {
				t.Errorf("webhookd %s with %v: exit %d, stdout %q, stderr %q; want exit 2 and %q once", cmd, c.vars, code,
					out, errOut, c.says)
			}
			checkErrorForm(t, []string{cmd}, errOut)
		}
	}
}
