// Command webhookd is the durable webhook delivery service: one binary that
// runs the API (serve), the delivery worker (worker), both with the
// dashboard (all), migrations (migrate), API keys (keys create, list,
// revoke), and
// sending one event through the Go client (send).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd/storage"
)

const usage = `webhookd — durable webhook delivery

Usage:
  webhookd all       API, worker and dashboard in one process
  webhookd serve     the public API and the dashboard
  webhookd worker    deliveries, retries, the reconciler and background jobs
                     (every kind answers /healthz, /readyz and /metrics on
                     WEBHOOKD_DASHBOARD_ADDR)
  webhookd migrate   apply database migrations (safe to rerun)
  webhookd keys create --project NAME [--rate-limit N] [--idempotency-ttl 24h]
                     create an API key (and the project if new); prints the key alone
  webhookd keys list --project NAME
                     the project's keys: id, prefix, created, revoked
  webhookd keys revoke KEY_PREFIX
                     revoke the one key with that prefix (or key id, or whole key);
                     it gets 401 on every API process
  webhookd secrets reseal
                     encrypt every endpoint secret and stored response with the first
                     key of WEBHOOKD_ENCRYPTION_KEY (after turning it on, or rotating)
  webhookd send --type T --data JSON|@file.json [--external-id X] [--endpoint ID]...
                     post one event through the API (WEBHOOKD_API_URL, WEBHOOKD_API_KEY);
                     prints the event id alone

Run "webhookd <command> -h" for the flags of a command; every flag also has a
WEBHOOKD_* environment variable (see README.md).
`

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
	defer stop()
	tuneGC(os.Getenv)
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, errSendFailed) { // it said why on stderr
			os.Exit(1)
		}
		if errors.As(err, new(refusedError)) { // no such key, say: not a usage error
			fmt.Fprintln(os.Stderr, "webhookd:", err)
			os.Exit(1)
		}
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "webhookd:", err)
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
				fmt.Fprintln(os.Stderr, "webhookd: the database has no webhookd tables yet: run `webhookd migrate` first")
			}
		}
		os.Exit(2)
	}
}

// run executes one command line.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, args := args[0], args[1:]
	if cmd == "send" {
		return runSend(ctx, args, getenv, stdout, stderr)
	}
	if cmd == "portal-link" {
		return runPortalLink(ctx, args, getenv, stdout, stderr)
	}
	if cmd == "secrets" {
		return runSecrets(ctx, args, getenv, stdout, stderr)
	}
	if cmd == "keys" {
		switch {
		case len(args) > 0 && (args[0] == "list" || args[0] == "revoke"):
			return runKeys(ctx, args, getenv, stdout, stderr)
		case len(args) == 0 || args[0] != "create":
			return errors.New(keysUsage)
		}
		cmd, args = "keys create", args[1:]
	}
	fs := flag.NewFlagSet("webhookd "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := DefaultConfig()
	check := cfg.bind(fs, getenv)
	var (
		project = fs.String("project", "", "project name (keys create)")
		rate    = fs.Int("rate-limit", 0, "API requests per minute for the project (keys create; default 6000)")
		idemTTL = fs.Duration("idempotency-ttl", 0, "how long Idempotency-Key records are kept, up to 72h (keys create; default 24h)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := check(); err != nil {
		return err
	}
	m := NewMain(cfg, stderr)
	defer m.Close()
	redis.SetLogger(redisLogger{m.Logger}) // go-redis's own lines, as ours
	switch cmd {
	case "migrate":
		if err := m.OpenDB(ctx); err != nil {
			return err
		}
		if err := m.DB.Migrate(ctx); err != nil {
			return err
		}
		m.Logger.Info("migrations applied")
		return nil
	case "keys create":
		if *project == "" {
			return errors.New("keys create: --project is required")
		}
		if err := m.OpenDB(ctx); err != nil {
			return err
		}
		key, _, err := m.DB.Store().CreateAPIKey(ctx, *project, storage.ProjectPlan{RateLimitPerMinute: *rate, IdempotencyTTL: *idemTTL})
		if err != nil {
			return fmt.Errorf("keys create: %w", err)
		}
		fmt.Fprintln(stdout, key)
		return nil
	case "serve", "worker", "all":
		// Every process kind answers /healthz, /readyz and /metrics; the
		// worker's listener has no dashboard.
		roles := Roles{API: cmd != "worker", Worker: cmd != "serve", Ops: true, NoDashboard: cmd == "worker"}
		if err := m.Start(ctx, roles); err != nil {
			return err
		}
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), m.Config.DrainTimeout)
		defer cancel()
		return m.Shutdown(shutdown)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q (want one of %s)", cmd, strings.Join([]string{"all", "serve", "worker", "migrate", "keys create", "send"}, ", "))
	}
}

// redisLogger sends go-redis's internal log lines (failed dials while Redis
// is away) to slog as warnings, instead of bare lines on stderr.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "redis")
}
