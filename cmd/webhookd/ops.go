package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd/archive"
	"github.com/webhookd/webhookd/outbox"
	"github.com/webhookd/webhookd/storage"
)

// checkTimeout bounds each dependency check of /readyz and of a scrape.
const checkTimeout = time.Second

// startOps serves /healthz, /readyz and /metrics on DashboardAddr, with the
// dashboard on every other path when withDashboard.
func (m *Main) startOps(withDashboard bool) error {
	mux := http.NewServeMux()
	paths := "/healthz /readyz /metrics"
	if withDashboard {
		if err := m.startDashboard(); err != nil {
			return err
		}
		mux.Handle("/", m.Dashboard)
		paths = "/ (login) " + paths
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", m.health.serveReadyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	addr, err := m.listen("ops", m.Config.DashboardAddr, mux)
	if err != nil {
		return err
	}
	m.OpsAddr = addr
	if withDashboard {
		m.Logger.Info("dashboard listening", "addr", addr, "url", "http://"+addr+"/", "paths", paths)
	} else {
		m.Logger.Info("health and metrics listening", "addr", addr, "paths", paths)
	}
	return nil
}

// health checks what a process depends on, for /readyz and for the
// webhookd_dependency_up gauge. What it reports names a dependency and
// says ok or down, never why: hosts, users and driver errors stay in the
// log, written when a dependency goes down.
type health struct {
	db    *storage.DB
	redis redis.UniversalClient
	// outbox, when set (a worker with WEBHOOKD_OUTBOX_SOURCES), is the
	// relay's Status, shown per source by /readyz.
	outbox func() []outbox.SourceStatus
	// archive, when set (a worker with WEBHOOKD_ARCHIVE_DIR), is the
	// Archiver's Status, shown by /readyz.
	archive func() archive.Status
	log     *slog.Logger
	up      *prometheus.Desc
	mu      sync.Mutex
	wasBad  map[string]bool
}

func newHealth(db *storage.DB, rdb redis.UniversalClient, log *slog.Logger) *health {
	return &health{db: db, redis: rdb, log: log, wasBad: map[string]bool{},
		up: prometheus.NewDesc("webhookd_dependency_up",
			"1 when the dependency answered a ping at this scrape (within 1 s), else 0.", []string{"dependency"}, nil)}
}

// check pings PostgreSQL and Redis at once and returns "ok" or "down" for
// each.
func (h *health) check(ctx context.Context) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	errs := make(map[string]error, 2)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, ping := range map[string]func(context.Context) error{
		"postgres": h.db.Ping,
		"redis":    func(ctx context.Context) error { return h.redis.Ping(ctx).Err() },
	} {
		wg.Go(func() {
			err := ping(ctx)
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	out := make(map[string]string, len(errs))
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, err := range errs {
		out[name] = "ok"
		if err != nil {
			out[name] = "down"
			if !h.wasBad[name] {
				h.log.Warn("dependency check failed", "dependency", name, "err", err)
			}
		} else if h.wasBad[name] {
			h.log.Info("dependency answers again", "dependency", name)
		}
		h.wasBad[name] = err != nil
	}
	return out
}

// readiness is the body of /readyz.
type readiness struct {
	Status string            `json:"status"` // ok or unavailable
	Checks map[string]string `json:"checks"` // dependency: ok or down
	// Outbox is each outbox source's last poll or move, by name
	// (outbox.SourceStatus); absent without sources.
	Outbox map[string]outboxReadiness `json:"outbox,omitempty"`
	// Archive is how the last archive write went; absent without
	// WEBHOOKD_ARCHIVE_DIR.
	Archive *archiveReadiness `json:"archive,omitempty"`
}

// archiveReadiness is the archive's last write in /readyz.
type archiveReadiness struct {
	Status string     `json:"status"` // idle (none yet), ok or failing
	Since  *time.Time `json:"since"`  // when status last changed; null while idle
	Error  *string    `json:"error"`  // why the last write failed; null unless failing
}

// outboxReadiness is one outbox source in /readyz.
type outboxReadiness struct {
	Status string    `json:"status"` // starting, ok or failing
	Since  time.Time `json:"since"`  // when status last changed
	Error  *string   `json:"error"`  // why it fails, in words naming no host, user or password; null unless failing
}

// serveReadyz answers 200 when PostgreSQL and Redis answer, else 503 with
// Retry-After, naming what is down. It also shows each outbox source's
// state, and the archive's last write, neither of which changes the
// answer: a service's database being down stops only its own rows, and a
// failed archive keeps its range; neither must take a process that keeps
// working out of its load balancer.
func (h *health) serveReadyz(w http.ResponseWriter, r *http.Request) {
	body := readiness{Status: "ok", Checks: h.check(r.Context())}
	if h.outbox != nil {
		body.Outbox = map[string]outboxReadiness{}
		for _, s := range h.outbox() {
			o := outboxReadiness{Status: s.State, Since: s.Since}
			if s.Error != "" {
				o.Error = &s.Error
			}
			body.Outbox[s.Name] = o
		}
	}
	if h.archive != nil {
		s := h.archive()
		body.Archive = &archiveReadiness{Status: s.State}
		if !s.Since.IsZero() {
			body.Archive.Since = &s.Since
		}
		if s.Error != "" {
			body.Archive.Error = &s.Error
		}
	}
	status := http.StatusOK
	for _, v := range body.Checks {
		if v != "ok" {
			body.Status, status = "unavailable", http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "5")
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

func (h *health) Describe(ch chan<- *prometheus.Desc) { ch <- h.up }

func (h *health) Collect(ch chan<- prometheus.Metric) {
	for name, v := range h.check(context.Background()) {
		up := 0.0
		if v == "ok" {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(h.up, prometheus.GaugeValue, up, name)
	}
}

// poolCollector reports the PostgreSQL pool's use at each scrape.
type poolCollector struct {
	db                                       *storage.DB
	conns, max, acquires, waits, waitSeconds *prometheus.Desc
}

func newPoolCollector(db *storage.DB) *poolCollector {
	return &poolCollector{db: db,
		conns: prometheus.NewDesc("webhookd_db_pool_connections",
			"PostgreSQL connections of this process's pool by state (acquired: in use).", []string{"state"}, nil),
		max: prometheus.NewDesc("webhookd_db_pool_max_connections",
			"The pool's size (WEBHOOKD_DATABASE_MAX_CONNS).", nil, nil),
		acquires: prometheus.NewDesc("webhookd_db_pool_acquires_total",
			"Connections taken from the pool.", nil, nil),
		waits: prometheus.NewDesc("webhookd_db_pool_empty_acquires_total",
			"Acquires that had to wait because every connection was in use.", nil, nil),
		waitSeconds: prometheus.NewDesc("webhookd_db_pool_acquire_seconds_total",
			"Total time spent taking connections from the pool.", nil, nil)}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.max, c.acquires, c.waits, c.waitSeconds} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.db.Pool().Stat()
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.ConstructingConns()), "constructing")
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(c.acquires, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(c.waitSeconds, prometheus.CounterValue, s.AcquireDuration().Seconds())
}
