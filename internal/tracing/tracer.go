// Package tracing is webhookd's OpenTelemetry tracing (SPEC §7): the spans
// of the API's requests, of the writes of events and of every attempt of
// every delivery, with their context carried across each hop as a W3C
// traceparent: from the caller's request into the API, from the event's
// row (events.trace_parent) into each attempt, whichever worker makes it
// and however much later, and from the attempt to the receiver.
//
// It is off unless the standard OTEL_* variables say where to send
// (Setup); off, the Tracer is nil and every method is a nil check: no
// span, no header read or sent, nothing stored.
package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// scope names the instrumentation in every span webhookd makes.
const scope = "github.com/webhookd/webhookd"

// Tracer starts webhookd's spans and carries their context over the hops
// of a delivery. A nil *Tracer is tracing off.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
}

// New returns a Tracer whose spans tp makes (Setup's provider, or a test's
// with an in-memory exporter).
func New(tp trace.TracerProvider) *Tracer {
	return &Tracer{tracer: tp.Tracer(scope)}
}

// On reports whether t traces.
func (t *Tracer) On() bool { return t != nil }

// Start begins a span named name of kind as a child of the span in ctx,
// if any; off, it returns ctx and a span that records nothing.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noop.Span{}
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// Extract returns ctx with the remote span of a request's traceparent
// header (the caller's), which the spans started from it continue.
func (t *Tracer) Extract(ctx context.Context, h http.Header) context.Context {
	if t == nil {
		return ctx
	}
	return t.prop.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject sets the traceparent header of an outgoing request to the span
// in ctx, which the receiver's spans then continue.
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	if t == nil {
		return
	}
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// TraceParent is the W3C traceparent of the span in ctx, to keep with
// what it wrote; "" when off or without a span.
func (t *Tracer) TraceParent(ctx context.Context) string {
	if t == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := traceParentCarrier{}
	t.prop.Inject(ctx, &c)
	return c.value
}

// Continue returns ctx with the remote span of a stored traceparent
// (TraceParent's), which the spans started from it continue; ctx as it
// is when off, or when tp is "" or not a traceparent.
func (t *Tracer) Continue(ctx context.Context, tp string) context.Context {
	if t == nil || tp == "" {
		return ctx
	}
	return t.prop.Extract(ctx, &traceParentCarrier{value: tp})
}

// IDs are the trace and span ids of the span in ctx, as hex; "" for both
// without one.
func IDs(ctx context.Context) (traceID, spanID string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

// traceParentCarrier carries a traceparent alone (no tracestate: a
// stored event keeps only the trace and its parent span).
type traceParentCarrier struct{ value string }

const traceParentKey = "traceparent"

func (c *traceParentCarrier) Get(key string) string {
	if key == traceParentKey {
		return c.value
	}
	return ""
}

func (c *traceParentCarrier) Set(key, value string) {
	if key == traceParentKey {
		c.value = value
	}
}

func (c *traceParentCarrier) Keys() []string { return []string{traceParentKey} }
