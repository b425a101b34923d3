package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Logger returns log with trace_id and span_id added to every line logged
// with a context that holds a span (InfoContext and the like), so that a
// line and its span find each other; off (t nil), log itself.
func (t *Tracer) Logger(log *slog.Logger) *slog.Logger {
	if t == nil {
		return log
	}
	return slog.New(spanHandler{log.Handler()})
}

// spanHandler adds the ids of the context's span to each record.
type spanHandler struct{ slog.Handler }

func (h spanHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h spanHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return spanHandler{h.Handler.WithAttrs(as)}
}

func (h spanHandler) WithGroup(name string) slog.Handler {
	return spanHandler{h.Handler.WithGroup(name)}
}
