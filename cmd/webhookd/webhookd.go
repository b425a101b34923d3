package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/archive"
	"github.com/webhookd/webhookd/bulk"
	"github.com/webhookd/webhookd/dashboard"
	"github.com/webhookd/webhookd/deadletter"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/redisbatch"
	"github.com/webhookd/webhookd/internal/redisurl"
	"github.com/webhookd/webhookd/internal/tracing"
	"github.com/webhookd/webhookd/outbox"
	"github.com/webhookd/webhookd/relay"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
	"github.com/webhookd/webhookd/wire"
)

// Roles says which parts a process runs.
type Roles struct {
	API    bool // the public API on APIAddr
	Worker bool // deliveries, the reconciler and background jobs
	Ops    bool // /healthz, /readyz, /metrics and the dashboard on DashboardAddr
	// NoDashboard leaves the dashboard off the ops listener: health and
	// metrics alone (webhookd worker).
	NoDashboard bool
}

// Main is one webhookd process: its configuration, connections and
// listeners. Tests start it on 127.0.0.1:0 against a throwaway database.
type Main struct {
	Config   Config
	Logger   *slog.Logger
	Registry *prometheus.Registry
	DB       *storage.DB
	Redis    redis.UniversalClient

	// SearchPath, when set, makes every database connection work in that
	// schema (tests).
	SearchPath string
	// Tracer, when set before Start, traces the API's requests and event
	// writes and the worker's attempts (UseTracing); nil: no tracing.
	Tracer *tracing.Tracer

	// Relay carries relay endpoints' deliveries to `webhookd listen`
	// (streams in the API, attempts in the worker), on a Redis client of
	// its own: its blocking reads hold connections.
	Relay      *relay.Hub
	relayRedis redis.UniversalClient

	API       *api.Server
	Dashboard *dashboard.Server
	Worker    *dispatcher.Worker
	Queue     *dispatcher.Queue
	// Outbox moves the outboxes of WEBHOOKD_OUTBOX_SOURCES beside the
	// worker; nil without sources.
	Outbox *outbox.Relay
	// Archiver writes history to WEBHOOKD_ARCHIVE_DIR, counting failed
	// writes in the process's metrics: the retention job calls it for a
	// day before it drops the day's partitions. Nil without the setting,
	// or outside a worker.
	Archiver *archive.Archiver
	APIAddr  string // the API's bound address once started
	OpsAddr  string // the ops listener's bound address once started

	servers []*listener
	health  *health
}

// NewMain returns a Main logging to logOut (JSON lines unless it is a
// terminal or WEBHOOKD_LOG_FORMAT says otherwise).
func NewMain(cfg Config, logOut io.Writer) *Main {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Main{Config: cfg, Registry: reg, Logger: newLogger(cfg.LogFormat, cfg.LogLevel, logOut)}
}

// UseTracing makes the process trace with tr (nil: off), its log lines
// logged with a span's context carrying trace_id and span_id. It is
// called before Start.
func (m *Main) UseTracing(tr *tracing.Tracer) {
	if tr != nil {
		m.Tracer, m.Logger = tr, tr.Logger(m.Logger)
	}
}

// OpenDB connects to PostgreSQL. An error reaching it names
// WEBHOOKD_DATABASE_URL.
func (m *Main) OpenDB(ctx context.Context) error {
	if m.DB != nil {
		return nil
	}
	db, err := storage.Open(ctx, storage.Config{URL: m.Config.DatabaseURL, SearchPath: m.SearchPath,
		MaxConns: int32(m.Config.DatabaseMaxConns), EncryptionKeys: m.Config.EncryptionKey}) // attempts hold no connection through their request
	var ce *pgconn.ConnectError
	var pe *pgconn.ParseConfigError
	if errors.As(err, &ce) || errors.As(err, &pe) { // pgx leaves the password out of both
		return fmt.Errorf("WEBHOOKD_DATABASE_URL: %w", err)
	}
	if err != nil {
		return err
	}
	m.DB = db
	return nil
}

// OpenRedis makes the Redis client. It does not need Redis to be up: the API
// fails open without it and the worker waits for it.
func (m *Main) OpenRedis() error {
	if m.Redis != nil {
		return nil
	}
	opts, err := redisurl.Parse(m.Config.RedisURL)
	if err != nil {
		return fmt.Errorf("WEBHOOKD_REDIS_URL: %w", err)
	}
	opts.DefaultDialTimeout(2 * time.Second)
	m.Redis = opts.NewClient()
	return nil
}

// Start opens connections and starts the listeners of roles.
func (m *Main) Start(ctx context.Context, roles Roles) error {
	if err := m.OpenDB(ctx); err != nil {
		return err
	}
	if err := m.DB.CheckMigrated(ctx); err != nil {
		return err
	}
	if err := m.OpenRedis(); err != nil {
		return err
	}
	if m.health == nil {
		m.health = newHealth(m.DB, m.Redis, m.Logger)
		if err := m.Registry.Register(m.health); err != nil {
			return err
		}
		if err := m.Registry.Register(newPoolCollector(m.DB)); err != nil {
			return err
		}
	}
	schedule, err := dispatcher.ParseSchedule(m.Config.RetrySchedule)
	if err != nil {
		return fmt.Errorf("WEBHOOKD_RETRY_SCHEDULE: %w", err)
	}
	probes, err := dispatcher.ParseSchedule(m.Config.CircuitProbes)
	if err != nil {
		return fmt.Errorf("WEBHOOKD_CIRCUIT_PROBES: %w", err)
	}
	circuit := storage.CircuitConfig{After: m.Config.CircuitAfter, Probes: probes, DisableAfter: m.Config.EndpointDisableAfter}
	if circuit.After == 0 {
		circuit.After = -1 // off, not the default
	}
	if circuit.DisableAfter == 0 {
		circuit.DisableAfter = -1
	}
	// The limiter, every enqueue and asynq's own calls are Lua scripts:
	// those of concurrent callers share one round trip.
	batched := redisbatch.Wrap(m.Redis)
	wcfg := dispatcher.Config{DB: m.DB, Redis: batched, Schedule: schedule, Concurrency: m.Config.WorkerConcurrency,
		EndpointInitialLimit: m.Config.EndpointInitialLimit, ReconcileInterval: m.Config.ReconcileInterval,
		HTTP: wire.HTTPConfig{ConnectTimeout: m.Config.ConnectTimeout, ResponseTimeout: m.Config.ResponseTimeout,
			AllowPrivateNetworks: m.Config.AllowPrivateNetworks},
		Retention: m.Config.Retention, Circuit: circuit, Logger: m.Logger, Metrics: m.Registry, Tracer: m.Tracer,
		TransformTimeout: m.Config.TransformTimeout, MaxPayloadBytes: m.Config.MaxPayloadBytes}
	m.Queue = dispatcher.NewQueue(batched, wcfg.Queue, wcfg.WithDefaults().TaskTimeout())
	if err := m.openRelay(); err != nil {
		return err
	}
	wcfg.Relays, wcfg.HTTP.Relay = m.Relay, m.Relay
	if roles.Worker {
		// Retention archives each day before it drops it.
		if err := m.openArchiver(); err != nil {
			return err
		}
		if a := m.Archiver; a != nil {
			wcfg.ArchiveDay = func(ctx context.Context, from, to time.Time) (storage.DayRows, error) {
				mf, err := a.Archive(ctx, from, to)
				return storage.DayRows{Events: mf.Rows("events"), Deliveries: mf.Rows("deliveries"),
					Attempts: mf.Rows("attempts"), DeadLetters: mf.Rows("dead_letters")}, err
			}
		}
		var deliverer *dispatcher.Deliverer
		replayer := &deadletter.Replayer{DB: m.DB, Logger: m.Logger,
			Lease: wcfg.WithDefaults().Lease() + time.Minute, // above one attempt
			Attempt: func(ctx context.Context, deliveryID, by string) (bool, error) {
				return deliverer.Replay(ctx, deliveryID, by)
			}}
		bulkRunner := &bulk.Runner{DB: m.DB, Logger: m.Logger, Enqueuer: m.Queue,
			Check: api.NewLineChecker(m.DB, m.Config.MaxPayloadBytes).Check}
		wcfg.Jobs = func(ctx context.Context, jobID string) error {
			kind, err := m.DB.Store().JobKind(ctx, jobID)
			switch {
			case webhookd.ErrorCode(err) == webhookd.CodeNotFound:
				return nil
			case err != nil:
				return err
			case kind == webhookd.JobEventBulk:
				return bulkRunner.Run(ctx, jobID)
			}
			return replayer.Run(ctx, jobID)
		}
		if m.Worker, err = dispatcher.NewWorker(wcfg); err != nil {
			return err
		}
		deliverer = m.Worker.Deliverer
		if err := m.Worker.Start(ctx); err != nil {
			return err
		}
		m.Logger.Info("worker started", "worker_id", m.Worker.ID(), "concurrency", m.Config.WorkerConcurrency,
			"schedule", m.Config.RetrySchedule)
		if err := m.startOutbox(ctx); err != nil {
			return err
		}
	}
	if roles.API {
		proxies, err := m.Config.trustedProxies()
		if err != nil {
			return err
		}
		srv, err := api.New(api.Config{DB: m.DB, Redis: batched, Enqueuer: m.Queue, Logger: m.Logger, Metrics: m.Registry,
			MaxPayloadBytes: m.Config.MaxPayloadBytes, MaxBatchBytes: m.Config.MaxBatchBytes,
			MaxBulkBytes: m.Config.MaxBulkBytes, MaxBulkEvents: m.Config.MaxBulkEvents,
			AllowPrivateNetworks: m.Config.AllowPrivateNetworks, TrustedProxies: proxies,
			RequestTimeout: m.Config.RequestTimeout, PortalBaseURL: m.Config.portalBaseURL(), Tracer: m.Tracer,
			Relay: m.Relay, TransformTimeout: m.Config.TransformTimeout})
		if err != nil {
			return err
		}
		m.API = srv
		if m.APIAddr, err = m.listen("api", m.Config.APIAddr, srv); err != nil {
			return err
		}
		m.Logger.Info("api listening", "addr", m.APIAddr)
	}
	if roles.Ops {
		return m.startOps(!roles.NoDashboard)
	}
	return nil
}

// openArchiver makes the Archiver of WEBHOOKD_ARCHIVE_DIR, its metrics
// (webhookd_archive_failures_total, webhookd_archive_last_success_timestamp_seconds)
// on the process's registry.
func (m *Main) openArchiver() error {
	if m.Config.ArchiveDir == "" || m.Archiver != nil {
		return nil
	}
	a, err := archive.NewArchiver(archive.Config{Dir: m.Config.ArchiveDir, Source: m.DB, Logger: m.Logger, Metrics: m.Registry})
	if err != nil {
		return fmt.Errorf("WEBHOOKD_ARCHIVE_DIR: %w", err)
	}
	m.Archiver = a
	if m.health != nil {
		m.health.archive = a.Status
	}
	m.Logger.Info("archive directory set", "dir", a.Dir())
	return nil
}

// openRelay makes the relay hub on a Redis client of its own.
func (m *Main) openRelay() error {
	if m.Relay != nil {
		return nil
	}
	opts, err := redisurl.Parse(m.Config.RedisURL)
	if err != nil {
		return fmt.Errorf("WEBHOOKD_REDIS_URL: %w", err)
	}
	opts.DefaultDialTimeout(2 * time.Second)
	m.relayRedis = opts.NewClient()
	m.Relay, err = relay.New(relay.Config{Redis: m.relayRedis, Wake: m.wakeRelay, Logger: m.Logger})
	return err
}

// wakeRelay makes the deliveries of project's relay name that waited for a
// listener due, and wakes their tasks (relay.Config.Wake). A wake that
// fails is the stream's next heartbeat's.
func (m *Main) wakeRelay(ctx context.Context, project, name string) {
	ws, err := m.DB.WakeRelay(ctx, project, webhookd.RelayURL(name))
	if err != nil {
		m.Logger.Debug("waking a relay's deliveries failed; the stream's next heartbeat will", "relay", name, "err", err)
		return
	}
	byEndpoint := map[string][]string{}
	for _, w := range ws {
		byEndpoint[w.EndpointID] = append(byEndpoint[w.EndpointID], w.DeliveryID)
	}
	for ep, ids := range byEndpoint {
		m.Queue.Wake(ctx, ep, ids...)
	}
}

// listen serves h on addr in the background and returns the bound address;
// name names the listener in the log.
func (m *Main) listen(name, addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen %s: %w", addr, err)
	}
	l := &listener{name: name, addr: ln.Addr().String(), conns: map[net.Conn]http.ConnState{}}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second, ErrorLog: slog.NewLogLogger(m.Logger.Handler(), slog.LevelWarn), ConnState: l.track}
	l.srv = srv
	m.servers = append(m.servers, l)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.Logger.Error("server stopped", "addr", addr, "err", err)
		}
	}()
	return ln.Addr().String(), nil
}

// startDashboard makes the dashboard. Without WEBHOOKD_ADMIN_TOKEN it
// generates a token for this process and prints it once, in the log.
func (m *Main) startDashboard() error {
	if m.Config.AdminToken == "" {
		m.Config.AdminToken = dashboard.NewAdminToken()
		m.Logger.Warn("WEBHOOKD_ADMIN_TOKEN is not set: log in to the dashboard with this generated token, "+
			"good until the process stops", "admin_token", m.Config.AdminToken)
	}
	d, err := dashboard.New(dashboard.Config{DB: m.DB, Enqueuer: m.Queue, AdminToken: m.Config.AdminToken,
		Inspector: dispatcher.NewInspector(m.DB, nil, m.Logger, transform.Config{Budget: m.Config.TransformTimeout,
			MaxOutput: int(m.Config.MaxPayloadBytes)}), Logger: m.Logger,
		PortalFrameAncestors: m.Config.portalFrameAncestors(), AllowPrivateNetworks: m.Config.AllowPrivateNetworks,
		TransformTimeout: m.Config.TransformTimeout, MaxPayloadBytes: m.Config.MaxPayloadBytes})
	if err != nil {
		return err
	}
	m.Dashboard = d
	return nil
}

// Shutdown stops the process gracefully (SPEC §1). At one moment the
// listeners stop accepting and the worker stops taking tasks (asynq stops
// dequeuing as its Shutdown begins); then it waits for both: the requests
// in flight until ctx ends, when the connections left are closed (and
// logged), and the attempts in flight, bounded by their own timeouts, until
// they are recorded. Its last line, "shutdown complete", says what it
// waited for, so that a clean stop reads differently from a crash.
func (m *Main) Shutdown(ctx context.Context) error {
	start := time.Now()
	names := make([]string, len(m.servers))
	for i, l := range m.servers {
		names[i] = l.name
	}
	w := m.Worker
	m.Worker = nil
	if m.Outbox != nil { // a batch under way rolls back in its source; its rows move again later
		m.Outbox.Stop()
		m.Outbox = nil
	}
	m.Logger.Info("shutting down: the listeners stop accepting and the worker stops taking tasks",
		"listeners", names, "worker", w != nil)
	var worker sync.WaitGroup
	if w != nil {
		worker.Go(w.Stop)
	}
	cut, errs := make([]int, len(m.servers)), make([]error, len(m.servers))
	var listeners sync.WaitGroup
	for i, l := range m.servers {
		listeners.Go(func() { cut[i], errs[i] = l.drain(ctx) })
	}
	listeners.Wait()
	requestsCut := 0
	for i, l := range m.servers {
		requestsCut += cut[i]
		if cut[i] > 0 {
			m.Logger.Warn("drain bound passed: closed the connections of requests still in flight",
				"listener", l.name, "addr", l.addr, "requests_cut", cut[i])
		}
	}
	m.servers = nil
	if m.API != nil {
		m.API.Wait() // answered requests still handing deliveries to the queue
		m.API.Close()
	}
	worker.Wait()
	if m.Relay != nil { // after the worker: its attempts in flight had their listeners' streams
		m.Relay.Close()
	}
	// requests_cut 0: every request in flight was answered; worker_drained:
	// the attempts in flight finished and were recorded.
	m.Logger.Info("shutdown complete", "took_ms", time.Since(start).Milliseconds(),
		"listeners_drained", names, "requests_cut", requestsCut, "worker_drained", w != nil)
	return errors.Join(errs...)
}

// Close releases connections.
func (m *Main) Close() {
	for _, l := range m.servers {
		l.srv.Close()
	}
	if m.API != nil {
		m.API.Close()
	}
	if m.Outbox != nil {
		m.Outbox.Stop()
	}
	if m.Worker != nil {
		m.Worker.Stop()
	}
	if m.Relay != nil {
		m.Relay.Close()
	}
	if m.relayRedis != nil {
		m.relayRedis.Close()
	}
	if m.Redis != nil {
		m.Redis.Close()
	}
	if m.DB != nil {
		m.DB.Close()
	}
}
