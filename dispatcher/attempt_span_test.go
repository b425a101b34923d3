package dispatcher_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/tracing"
	"github.com/webhookd/webhookd/storage"
)

// syncBuffer is a log buffer written by the worker's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEveryAttemptIsASpanOfTheEventsTrace: an event written under a span
// (its stored traceparent) to two endpoints, one failing once, makes
// three attempt spans, each a child of that span in its trace; each
// receiver sees its attempt's span as its parent; the attempts show the
// trace id, and their log lines the trace and span ids.
func TestEveryAttemptIsASpanOfTheEventsTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	var logs syncBuffer
	e := newEnv(t, func(c *dispatcher.Config) {
		c.Tracer, c.Logger = tr, tr.Logger(slog.New(slog.NewJSONHandler(&logs, nil)))
	})
	flaky := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	steady := newReceiver(t, status(http.StatusOK))
	e.endpoint(flaky.URL, nil)
	e.endpoint(steady.URL, nil)

	const traceID, writeSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	now := time.Now()
	evs, err := e.db.Store().CreateEvents(context.Background(), e.project.ID, []storage.NewEvent{{Type: "a",
		Data: json.RawMessage(`{}`), TraceParent: "00-" + traceID + "-" + writeSpan + "-01"}}, now, func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var due []webhookd.ScheduledDelivery
	for _, d := range evs[0].Deliveries {
		due = append(due, webhookd.ScheduledDelivery{ID: d.ID, EndpointID: d.EndpointID, DueAt: now})
	}
	if err := e.worker.Queue.Enqueue(context.Background(), due...); err != nil {
		t.Fatal(err)
	}
	var attempts []webhookd.Attempt
	for _, d := range due {
		attempts = append(attempts, e.waitStatus(d.ID, webhookd.DeliverySucceeded, 20*time.Second).Attempts...)
	}

	var spanIDs []string
	for _, s := range exp.GetSpans() {
		if s.Name != "webhookd.attempt" {
			continue
		}
		if s.SpanContext.TraceID().String() != traceID || s.Parent.SpanID().String() != writeSpan {
			t.Errorf("attempt span in trace %s under %s, want trace %s under %s", s.SpanContext.TraceID(), s.Parent.SpanID(),
				traceID, writeSpan)
		}
		spanIDs = append(spanIDs, s.SpanContext.SpanID().String())
	}
	if len(spanIDs) != 3 {
		t.Fatalf("%d attempt spans, want 3", len(spanIDs))
	}
	for _, rc := range []*receiver{flaky, steady} {
		for _, r := range rc.requests() {
			tp := strings.Split(r.header.Get("traceparent"), "-")
			if len(tp) != 4 || tp[1] != traceID || !slices.Contains(spanIDs, tp[2]) {
				t.Errorf("receiver got traceparent %q, want one of an attempt span of trace %s", r.header.Get("traceparent"), traceID)
			}
		}
	}
	if len(attempts) != 3 {
		t.Fatalf("%d attempts", len(attempts))
	}
	for _, a := range attempts {
		if a.TraceID != traceID {
			t.Errorf("attempt %s #%d has trace id %q", a.DeliveryID, a.Number, a.TraceID)
		}
	}
	// An attempt's log line comes after its record, which waitStatus saw:
	// the last one may still be on its way (CI on d3b0128 read 2 of 3).
	attemptLines := func() []map[string]any {
		var out []map[string]any
		for line := range strings.SplitSeq(logs.String(), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "delivery attempt" {
				out = append(out, l)
			}
		}
		return out
	}
	got := attemptLines()
	for deadline := time.Now().Add(10 * time.Second); len(got) < 3 && time.Now().Before(deadline); got = attemptLines() {
		time.Sleep(10 * time.Millisecond) // poll for the last line
	}
	lines := len(got)
	for _, l := range got {
		if sid, _ := l["span_id"].(string); l["trace_id"] != traceID || !slices.Contains(spanIDs, sid) {
			t.Errorf("attempt log line with trace_id %v span_id %v", l["trace_id"], l["span_id"])
		}
	}
	if lines != 3 {
		t.Fatalf("%d attempt log lines, want 3", lines)
	}
}

// TestNoTraceParentWithoutATracer: with tracing off, a receiver gets no
// traceparent, even for an event written with one, and the attempt has
// no trace id.
func TestNoTraceParentWithoutATracer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rc := newReceiver(t, status(http.StatusOK))
	e.endpoint(rc.URL, nil)
	now := time.Now()
	evs, err := e.db.Store().CreateEvents(context.Background(), e.project.ID, []storage.NewEvent{{Type: "a",
		Data: json.RawMessage(`{}`), TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}, now,
		func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	d := evs[0].Deliveries[0]
	if err := e.worker.Queue.Enqueue(context.Background(), webhookd.ScheduledDelivery{ID: d.ID, EndpointID: d.EndpointID, DueAt: now}); err != nil {
		t.Fatal(err)
	}
	got := e.waitStatus(d.ID, webhookd.DeliverySucceeded, 20*time.Second)
	if h := rc.requests()[0].header; h.Get("traceparent") != "" || got.Attempts[0].TraceID != "" {
		t.Fatalf("off: traceparent %q sent, trace id %q recorded", h.Get("traceparent"), got.Attempts[0].TraceID)
	}
}
