package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/internal/tracing"
)

const (
	callerTrace = "0af7651916cd43dd8448eb211c80319c"
	callerSpan  = "b7ad6b7169203331"
)

// spansNamed waits until exp holds n spans named name, and returns them.
func spansNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string, n int) tracetest.SpanStubs {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var out tracetest.SpanStubs
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				out = append(out, s)
			}
		}
		if len(out) >= n {
			if len(out) > n {
				t.Fatalf("%d spans named %s, want %d", len(out), name, n)
			}
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans named %s within 10s, want %d", len(out), name, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// traceParentOf is the trace_parent stored with an event.
func (h *harness) traceParentOf(eventID string) *string {
	h.t.Helper()
	var tp *string
	if err := h.db.Pool().QueryRow(context.Background(), `SELECT trace_parent FROM events WHERE id = $1`, eventID).Scan(&tp); err != nil {
		h.t.Fatal(err)
	}
	return tp
}

// TestEventRequestContinuesTheCallersTrace: a POST of events with the
// caller's traceparent is a server span, the child of the caller's span,
// named after its route; the write of its events is a span under it; and
// every event keeps the write span's traceparent for its attempts. A
// request without a traceparent starts a trace of its own, kept the same
// way.
func TestEventRequestContinuesTheCallersTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	h := newHarness(t, func(c *api.Config) {
		c.Tracer = tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	})
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	exp.Reset()

	r := h.do(req{method: "POST", path: "/v1/events/batch", idem: uuid.NewString(),
		body:   `{"events":[{"type":"a","data":1},{"type":"b","data":2}]}`,
		header: map[string]string{"traceparent": "00-" + callerTrace + "-" + callerSpan + "-01"}})
	expectStatus(t, r, http.StatusAccepted)
	apiSpan := spansNamed(t, exp, "POST /v1/events/batch", 1)[0]
	write := spansNamed(t, exp, "webhookd.event.write", 1)[0]
	if apiSpan.SpanKind != trace.SpanKindServer || apiSpan.SpanContext.TraceID().String() != callerTrace ||
		apiSpan.Parent.SpanID().String() != callerSpan {
		t.Fatalf("request span %v in trace %s under %s, want a server span under the caller's %s %s", apiSpan.SpanKind,
			apiSpan.SpanContext.TraceID(), apiSpan.Parent.SpanID(), callerTrace, callerSpan)
	}
	if write.Parent.SpanID() != apiSpan.SpanContext.SpanID() || write.SpanContext.TraceID() != apiSpan.SpanContext.TraceID() {
		t.Fatalf("write span under %s, want under the request's %s", write.Parent.SpanID(), apiSpan.SpanContext.SpanID())
	}
	want := "00-" + callerTrace + "-" + write.SpanContext.SpanID().String() + "-01"
	for _, ev := range r.json(t)["data"].([]any) {
		id := ev.(map[string]any)["id"].(string)
		if tp := h.traceParentOf(id); tp == nil || *tp != want {
			t.Fatalf("event %s keeps trace parent %v, want %s", id, tp, want)
		}
	}

	exp.Reset()
	r = h.do(req{method: "POST", path: "/v1/events", idem: uuid.NewString(), body: `{"type":"a","data":1}`})
	expectStatus(t, r, http.StatusAccepted)
	apiSpan = spansNamed(t, exp, "POST /v1/events", 1)[0]
	write = spansNamed(t, exp, "webhookd.event.write", 1)[0]
	if apiSpan.Parent.IsValid() || write.Parent.SpanID() != apiSpan.SpanContext.SpanID() {
		t.Fatalf("without a caller's traceparent: request span under %v, write under %v", apiSpan.Parent.SpanID(),
			write.Parent.SpanID())
	}
	if tp := h.traceParentOf(r.json(t)["id"].(string)); tp == nil ||
		*tp != "00-"+write.SpanContext.TraceID().String()+"-"+write.SpanContext.SpanID().String()+"-01" {
		t.Fatalf("event keeps trace parent %v", tp)
	}
}

// TestRequestSpansAreNamedAfterTheirRoute: every API request is a span
// named by method and route (the pattern, not the path), and the catch-all
// of unknown paths too.
func TestRequestSpansAreNamedAfterTheirRoute(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	h := newHarness(t, func(c *api.Config) {
		c.Tracer = tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	})
	expectStatus(t, h.do(req{method: "GET", path: "/v1/events/evt_nope"}), http.StatusNotFound)
	expectStatus(t, h.do(req{method: "GET", path: "/v1/nothing/here"}), http.StatusNotFound)
	for name, route := range map[string]string{"GET /v1/events/{id}": "/v1/events/{id}", "GET /": "/"} {
		s := spansNamed(t, exp, name, 1)[0]
		var got string
		for _, a := range s.Attributes {
			if a.Key == "http.route" {
				got = a.Value.AsString()
			}
		}
		if got != route {
			t.Errorf("span %s has http.route %q, want %q", name, got, route)
		}
	}
}

// TestNoTraceKeptWithoutATracer: with tracing off a caller's traceparent
// is not read, and the event keeps none.
func TestNoTraceKeptWithoutATracer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	r := h.do(req{method: "POST", path: "/v1/events", idem: uuid.NewString(), body: `{"type":"a","data":1}`,
		header: map[string]string{"traceparent": "00-" + callerTrace + "-" + callerSpan + "-01"}})
	expectStatus(t, r, http.StatusAccepted)
	if tp := h.traceParentOf(r.json(t)["id"].(string)); tp != nil {
		t.Fatalf("off, the event keeps trace parent %q", *tp)
	}
}
