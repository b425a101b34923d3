package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabledOnlyWhenTheVariablesSayWhereTo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vars map[string]string
		on   bool
		err  string // part of the error, if one
	}{
		{name: "nothing set", vars: nil},
		{name: "endpoint", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "traces endpoint", vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, on: true},
		{name: "exporter otlp alone", vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "exporter none beats an endpoint", vars: map[string]string{"OTEL_TRACES_EXPORTER": "none",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "sdk disabled", vars: map[string]string{"OTEL_SDK_DISABLED": "true",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "another exporter", vars: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "OTEL_TRACES_EXPORTER"},
		{name: "grpc", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "the traces' protocol wins", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true},
		{name: "grpc while off is no matter", vars: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, err := Enabled(env(tc.vars))
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one naming %s", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case on != tc.on:
				t.Fatalf("on %v, want %v", on, tc.on)
			}
		})
	}
}

func TestSetupOffMakesNothing(t *testing.T) {
	t.Parallel()
	p, err := Setup(context.Background(), env(nil), "test", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if p.Tracer() != nil {
		t.Fatal("a tracer while off")
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func newTestTracer() (*Tracer, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	return New(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))), exp
}

// TestTraceParentCrossesTheHops: a caller's traceparent read from a
// request, kept as text, continued later, and sent on: the same trace all
// along, each span the child of the one before.
func TestTraceParentCrossesTheHops(t *testing.T) {
	t.Parallel()
	tr, exp := newTestTracer()
	const caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	in := http.Header{"Traceparent": {caller}}
	ctx, api := tr.Start(tr.Extract(context.Background(), in), "api", trace.SpanKindServer)
	stored := tr.TraceParent(ctx)
	api.End()

	ctx, attempt := tr.Start(tr.Continue(context.Background(), stored), "attempt", trace.SpanKindClient)
	out := http.Header{}
	tr.Inject(ctx, out)
	attempt.End()

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	a, b := spans[0], spans[1]
	if a.SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || b.SpanContext.TraceID() != a.SpanContext.TraceID() {
		t.Fatalf("trace ids %s, %s", a.SpanContext.TraceID(), b.SpanContext.TraceID())
	}
	if a.Parent.SpanID().String() != "b7ad6b7169203331" || !a.Parent.IsRemote() {
		t.Fatalf("api span's parent %v", a.Parent)
	}
	if b.Parent.SpanID() != a.SpanContext.SpanID() {
		t.Fatalf("attempt's parent %s, want the api span %s", b.Parent.SpanID(), a.SpanContext.SpanID())
	}
	want := "00-" + b.SpanContext.TraceID().String() + "-" + b.SpanContext.SpanID().String() + "-01"
	if got := out.Get("traceparent"); got != want {
		t.Fatalf("traceparent sent %q, want %q", got, want)
	}
	if stored != "00-"+a.SpanContext.TraceID().String()+"-"+a.SpanContext.SpanID().String()+"-01" {
		t.Fatalf("stored %q", stored)
	}
}

// TestOffTouchesNothing: a nil Tracer reads no header, sends none, keeps
// nothing, and its spans record nothing.
func TestOffTouchesNothing(t *testing.T) {
	t.Parallel()
	var tr *Tracer
	in := http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	ctx, span := tr.Start(tr.Extract(context.Background(), in), "api", trace.SpanKindServer)
	span.End()
	if span.IsRecording() || tr.TraceParent(ctx) != "" || trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("off, something was traced")
	}
	out := http.Header{}
	tr.Inject(tr.Continue(ctx, in.Get("traceparent")), out)
	if len(out) != 0 {
		t.Fatalf("off, sent %v", out)
	}
	if log := slog.Default(); tr.Logger(log) != log {
		t.Fatal("off, the logger changed")
	}
}

func TestContinueIgnoresWhatIsNotATraceParent(t *testing.T) {
	t.Parallel()
	tr, _ := newTestTracer()
	for _, tp := range []string{"", "garbage", "00-00000000000000000000000000000000-b7ad6b7169203331-01"} {
		if trace.SpanContextFromContext(tr.Continue(context.Background(), tp)).IsValid() {
			t.Errorf("%q continued", tp)
		}
	}
}

func TestLogLinesCarryTheSpan(t *testing.T) {
	t.Parallel()
	tr, _ := newTestTracer()
	var buf bytes.Buffer
	log := tr.Logger(slog.New(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	ctx, span := tr.Start(context.Background(), "attempt", trace.SpanKindClient)
	log.InfoContext(ctx, "delivery attempt", "attempt", 1)
	span.End()
	log.Info("no span")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	traceID, spanID := IDs(ctx)
	if first["trace_id"] != traceID || first["span_id"] != spanID || first["component"] != "test" || traceID == "" {
		t.Fatalf("line %v, want trace_id %s span_id %s", first, traceID, spanID)
	}
	if _, ok := second["trace_id"]; ok {
		t.Fatalf("a line without a span has ids: %v", second)
	}
}

// TestOffAllocatesNothing: while off, what the API and the worker call on
// every request and attempt costs no allocation.
func TestOffAllocatesNothing(t *testing.T) {
	var tr *Tracer
	ctx := context.Background()
	h := http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	if n := testing.AllocsPerRun(100, func() {
		c, span := tr.Start(tr.Continue(tr.Extract(ctx, h), "x"), "attempt", trace.SpanKindClient)
		tr.Inject(c, h)
		_ = tr.TraceParent(c)
		_, _ = IDs(c)
		span.End()
	}); n != 0 {
		t.Fatalf("%v allocations a call while off", n)
	}
}
