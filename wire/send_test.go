package wire

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/tracing"
)

// TestSendCarriesTheAttemptsTraceParent: with a Tracer, the receiver gets
// the traceparent of the span Send runs in, and the attempt's logged
// request headers show it; without one, no traceparent is sent, even from
// a context that holds a span.
func TestSendCarriesTheAttemptsTraceParent(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}))
	t.Cleanup(rc.Close)
	tr := tracing.New(sdktrace.NewTracerProvider())
	ctx, span := tr.Start(context.Background(), "attempt", trace.SpanKindClient)
	defer span.End()
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	ev := webhookd.Event{ID: "evt_1", Type: "a", Data: []byte("1"), CreatedAt: time.Now()}
	a := webhookd.Attempt{Number: 1, RequestID: "req_1", URL: rc.URL, StartedAt: time.Now()}

	for _, tc := range []struct {
		name   string
		tracer *tracing.Tracer
		want   string
	}{{"on", tr, want}, {"off", nil, ""}} {
		s := Sender{Client: rc.Client(), BodyTimeout: time.Second, Tracer: tc.tracer}
		out, resp := s.Send(ctx, ev, []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, a)
		if resp.Err != nil {
			t.Fatalf("%s: %v", tc.name, resp.Err)
		}
		h := <-got
		if h.Get("traceparent") != tc.want || out.RequestHeaders["Traceparent"] != tc.want {
			t.Fatalf("%s: traceparent sent %q, logged %q; want %q", tc.name, h.Get("traceparent"),
				out.RequestHeaders["Traceparent"], tc.want)
		}
		if h.Get("X-Request-Id") != "req_1" {
			t.Fatalf("%s: X-Request-Id %q", tc.name, h.Get("X-Request-Id"))
		}
	}
}
