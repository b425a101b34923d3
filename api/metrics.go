package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// apiMetrics are the API's Prometheus series, by route: the pattern the
// request matched ("POST /v1/events"), so their number stays bounded.
type apiMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	replays  *prometheus.CounterVec
}

func newAPIMetrics(reg prometheus.Registerer) (*apiMetrics, error) {
	m := &apiMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhookd_api_requests_total",
			Help: "API requests by route and HTTP status (429: rate limited; 503: PostgreSQL unavailable or the request timed out).",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "webhookd_api_request_duration_seconds",
			Help:    "Time to answer an API request, by route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhookd_api_idempotent_replays_total",
			Help: "API requests answered with a stored response (Idempotent-Replayed: true), by route.",
		}, []string{"route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.replays} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// instrument counts every request h answers and, with a Tracer, makes it a
// span: the child of the caller's, when its traceparent names one.
func (s *Server) instrument(h http.Handler) (http.Handler, error) {
	m, err := newAPIMetrics(s.cfg.Metrics)
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		var span trace.Span
		if s.cfg.Tracer.On() {
			var ctx context.Context
			ctx, span = s.cfg.Tracer.Start(s.cfg.Tracer.Extract(r.Context(), r.Header), r.Method, trace.SpanKindServer,
				attribute.String("http.request.method", r.Method))
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(sw, r)
		route := r.Pattern // set by the mux on r
		if route == "" {
			route = "unmatched" // 405, or a request the mux refused
		}
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		if span != nil {
			endRequestSpan(span, r, code)
		}
		m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		if sw.replayed {
			m.replays.WithLabelValues(route).Inc()
		}
	}), nil
}

// endRequestSpan names a request's span after its route ("POST
// /v1/events") and ends it with its status; a 5xx is an error.
func endRequestSpan(span trace.Span, r *http.Request, code int) {
	if r.Pattern != "" {
		method, route, ok := strings.Cut(r.Pattern, " ")
		if !ok { // a pattern for every method ("/": no such route)
			method, route = r.Method, method
		}
		span.SetName(method + " " + route)
		span.SetAttributes(attribute.String("http.route", route))
	}
	span.SetAttributes(attribute.Int("http.response.status_code", code))
	if code >= 500 {
		span.SetStatus(codes.Error, http.StatusText(code))
	}
	span.End()
}

// statusWriter remembers the status written and whether it was a replay.
type statusWriter struct {
	http.ResponseWriter
	code     int
	replayed bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
		w.replayed = w.Header().Get("Idempotent-Replayed") == "true"
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
