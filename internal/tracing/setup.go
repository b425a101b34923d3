package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Provider is a process's tracing: the SDK's tracer provider and its
// OTLP/HTTP exporter while on, nothing while off.
type Provider struct {
	sdk    *sdktrace.TracerProvider // nil: off
	tracer *Tracer
}

// Enabled tells from the standard OTEL_* variables whether traces are to
// be sent (SPEC §7: off unless they say where to): OTEL_SDK_DISABLED=true
// or OTEL_TRACES_EXPORTER=none turns tracing off; OTEL_TRACES_EXPORTER=otlp
// turns it on (to http://localhost:4318 unless an endpoint is given); left
// unset, it is on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. Another exporter, or a
// protocol other than OTLP over HTTP, is an error naming the variable.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	on := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v != "" {
		on = false
		for e := range strings.SplitSeq(v, ",") {
			switch e = strings.TrimSpace(e); e {
			case "otlp":
				on = true
			case "none":
				return false, nil
			default:
				return false, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not an exporter webhookd has (otlp or none)", e)
			}
		}
	}
	if !on {
		return false, nil
	}
	name := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" // the traces' own setting wins
	if getenv(name) == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
	}
	switch p := strings.TrimSpace(getenv(name)); p {
	case "", "http/protobuf", "http/json":
	default:
		return false, fmt.Errorf("%s: %q is not a protocol webhookd sends traces with (http/protobuf or http/json: "+
			"OTLP over HTTP, a collector's port 4318)", name, p)
	}
	return true, nil
}

// Setup makes the process's tracing from the standard OTEL_* variables
// (Enabled). While on, spans go in batches to the OTLP/HTTP endpoint, the
// exporter and the SDK reading the rest of their settings from the same
// variables (headers, timeout, compression, certificates, sampler, batch
// sizes, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the service is
// named webhookd unless they say otherwise), and the SDK's own errors (a
// collector that cannot be reached) are logged to log as warnings. Off,
// nothing is made: Tracer is nil and Shutdown does nothing.
func Setup(ctx context.Context, getenv func(string) string, version string, log *slog.Logger) (*Provider, error) {
	on, err := Enabled(getenv)
	if err != nil || !on {
		return &Provider{}, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "webhookd"), attribute.String("service.version", version)),
		resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: spans not exported", "err", err)
	}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{sdk: tp, tracer: New(tp)}, nil
}

// Tracer is the process's tracer: nil while tracing is off.
func (p *Provider) Tracer() *Tracer { return p.tracer }

// Shutdown sends the spans still waiting and stops the exporter, within
// ctx. A process calls it last, once its requests and attempts are done.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	return nil
}
