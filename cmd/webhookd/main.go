// Command webhookd is the durable webhook delivery service: one binary that
// runs the API (serve), the delivery worker (worker), both with the
// dashboard (all), migrations (migrate), API keys (keys create, list,
// revoke), the re-encryption of stored secrets (secrets reseal),
// sending one event through the Go client (send), the forwarding of a relay
// endpoint's deliveries to a local receiver (listen), and reading and
// replaying archived history (archive list, show, replay). cli.go holds the
// table of commands that their help and parsing come from.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/tracing"
)

// tuneGC sets the collector for a small live heap under a high
// allocation rate (every request and attempt allocates; little of it
// lives on), where Go's default GOGC=100 collects often for little gain.
// Unless GOGC or GOMEMLIMIT say otherwise, the heap
// may grow to 4× what is live before a collection, within a soft limit of
// 128 MiB past which the collector works harder instead.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(300)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(128 << 20)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	tuneGC(os.Getenv)
	code := cli(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// newMain makes the Main of a command, with go-redis's own log lines sent
// to its logger.
func newMain(inv *invocation) *Main {
	m := NewMain(inv.cfg, inv.stderr)
	redis.SetLogger(redisLogger{m.Logger})
	return m
}

// serveAs is the setup of all, serve and worker: run the process with
// roles until SIGTERM or SIGINT, then shut it down gracefully. Tracing is
// on when the standard OTEL_* variables say where to send (tracing.Setup);
// the spans still waiting are sent last, after the shutdown.
func serveAs(roles Roles) func(*flagSet) action {
	return func(*flagSet) action {
		return func(ctx context.Context, inv *invocation) error {
			m := newMain(inv)
			defer m.Close()
			tp, err := tracing.Setup(ctx, inv.getenv, webhookd.Version, m.Logger)
			if err != nil {
				return err
			}
			defer flushTraces(tp, m.Logger)
			if tr := tp.Tracer(); tr != nil {
				m.UseTracing(tr)
				m.Logger.Info("tracing on: spans go over OTLP/HTTP", "endpoint", otlpEndpoint(inv.getenv))
			}
			if err := m.Start(ctx, roles); err != nil {
				return err
			}
			<-ctx.Done()
			shutdown, cancel := context.WithTimeout(context.Background(), m.Config.DrainTimeout)
			defer cancel()
			return m.Shutdown(shutdown)
		}
	}
}

// traceFlushTimeout bounds sending the last spans at exit.
const traceFlushTimeout = 5 * time.Second

// flushTraces sends the spans still waiting, within traceFlushTimeout.
func flushTraces(tp *tracing.Provider, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("the last spans were not sent", "err", err)
	}
}

// otlpEndpoint is where spans go, for the log: the traces' endpoint, the
// general one, or the exporter's default, with any credentials hidden.
func otlpEndpoint(getenv func(string) string) string {
	e := cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "http://localhost:4318")
	if r, ok := redactURL(e); ok {
		return r
	}
	return "(not a URL)"
}

// runMigrate applies the migrations.
func runMigrate(ctx context.Context, inv *invocation) error {
	m := newMain(inv)
	defer m.Close()
	if err := m.OpenDB(ctx); err != nil {
		return err
	}
	if err := m.DB.Migrate(ctx); err != nil {
		return err
	}
	m.Logger.Info("migrations applied")
	// The days ahead, before any process serves: the leader worker's
	// retention pass would make them at its start, under traffic.
	if _, err := dispatcher.MakeDaysAhead(ctx, m.DB, time.Now(), m.Logger); err != nil {
		m.Logger.Warn("history partitions not made ahead; the worker's retention pass makes them", "err", err)
	}
	return nil
}

// redisLogger sends go-redis's internal log lines (failed dials while Redis
// is away) to slog as warnings, instead of bare lines on stderr.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "redis")
}
