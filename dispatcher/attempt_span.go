package dispatcher

import (
	"context"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/wire"
)

// attemptSpanName names every attempt's span.
const attemptSpanName = "webhookd.attempt"

// startAttempt begins the span of an attempt of a claimed delivery: a
// child of the span its event was written in (Lease.TraceParent), so that
// every attempt of every delivery of an event, first or retry, in any
// worker, is in the trace of the request that made the event; a trace of
// its own when the event has none (written while tracing was off, or an
// operational event). Its context is the request's, whose traceparent the
// receiver gets (wire.Sender). Off, ctx is returned as it is.
func (d *Deliverer) startAttempt(ctx context.Context, l *storage.Lease, trigger string) (context.Context, trace.Span) {
	if !d.tracer.On() {
		return ctx, noop.Span{}
	}
	del := l.Delivery
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", "POST"),
		attribute.String("webhookd.delivery.id", del.ID),
		attribute.String("webhookd.event.id", del.EventID),
		attribute.String("webhookd.event.type", del.EventType),
		attribute.String("webhookd.endpoint.id", del.EndpointID),
		attribute.Int("webhookd.attempt.number", del.AttemptsCount+1),
		attribute.String("webhookd.attempt.trigger", trigger),
		attribute.String("webhookd.request_id", l.Token),
	}
	// The host and port alone: an endpoint's path or query may hold a
	// token of the receiver's.
	if u, err := url.Parse(l.Endpoint.URL); err == nil {
		attrs = append(attrs, attribute.String("server.address", u.Hostname()))
		if p, err := strconv.Atoi(u.Port()); err == nil {
			attrs = append(attrs, attribute.Int("server.port", p))
		}
	}
	return d.tracer.Start(d.tracer.Continue(ctx, l.TraceParent), attemptSpanName, trace.SpanKindClient, attrs...)
}

// endAttempt ends an attempt's span with what it got and the delivery's
// status after it; an attempt that got no 2xx is an error.
func endAttempt(span trace.Span, a webhookd.Attempt, resp wire.Response, outcome string) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("webhookd.outcome", outcome))
	switch {
	case resp.Err != nil:
		span.SetAttributes(attribute.String("error.type", "no_response"))
		span.SetStatus(codes.Error, deref(a.Error))
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode),
			attribute.String("error.type", strconv.Itoa(resp.StatusCode)))
		span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(resp.StatusCode))
	default:
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	}
}
