// Command webhookd is the durable webhook delivery service: one binary that
// runs the API (serve), the delivery worker (worker), both with the
// dashboard (all), migrations (migrate), API keys (keys create, list,
// revoke), the re-encryption of stored secrets (secrets reseal),
// sending one event through the Go client (send), and the forwarding of a relay
// endpoint's deliveries to a local receiver (listen). cli.go holds the table
// of commands that their help and parsing come from.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/redis/go-redis/v9"
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
// roles until SIGTERM or SIGINT, then shut it down gracefully.
func serveAs(roles Roles) func(*flagSet) action {
	return func(*flagSet) action {
		return func(ctx context.Context, inv *invocation) error {
			m := newMain(inv)
			defer m.Close()
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
	return nil
}

// redisLogger sends go-redis's internal log lines (failed dials while Redis
// is away) to slog as warnings, instead of bare lines on stderr.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "redis")
}
