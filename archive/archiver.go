package archive

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config is what an Archiver writes with.
type Config struct {
	Dir    string // required: WEBHOOKD_ARCHIVE_DIR
	Source Source // required: the database (storage.DB)
	Logger *slog.Logger
	// Metrics registers webhookd_archive_failures_total and
	// webhookd_archive_last_success_timestamp_seconds (default: a registry
	// of its own).
	Metrics prometheus.Registerer
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	return c
}

// Validate names the first field missing.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("archive config: Dir is required")
	case c.Source == nil:
		return errors.New("archive config: Source is required")
	}
	return nil
}

// Archiver writes verified archives into its directory and says how that
// went, in the log, the metrics and Status (/readyz): what the retention job calls before
// it drops a range, and watches to keep the range when the write fails.
type Archiver struct {
	cfg         Config
	failures    prometheus.Counter
	lastSuccess prometheus.Gauge

	mu     sync.Mutex
	status Status
}

// Status is how the Archiver's last write went, for /readyz.
type Status struct {
	State string    // idle (nothing written yet), ok or failing
	Since time.Time // when State last changed; zero while idle
	Error string    // why the last write failed, naming no host or user (a database error is in the log only); "" unless failing
}

// Status returns how the last write went.
func (a *Archiver) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// setStatus records the outcome of a write.
func (a *Archiver) setStatus(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	state, msg := "ok", ""
	if err != nil {
		state, msg = "failing", err.Error()
		if errors.As(err, new(SourceError)) {
			msg = "cannot read the history from the database (the log says why)"
		}
	}
	if a.status.State != state {
		a.status.Since = time.Now().UTC()
	}
	a.status.State, a.status.Error = state, msg
}

// NewArchiver returns an Archiver with its metrics registered.
func NewArchiver(cfg Config) (*Archiver, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Archiver{cfg: cfg, status: Status{State: "idle"},
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "webhookd_archive_failures_total",
			Help: "Archive writes (WEBHOOKD_ARCHIVE_DIR) that failed; the range they were for is kept."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "webhookd_archive_last_success_timestamp_seconds",
			Help: "When the last archive was written and verified, as a Unix time; 0 before the first."}),
	}
	for _, c := range []prometheus.Collector{a.failures, a.lastSuccess} {
		if err := cfg.Metrics.Register(c); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Dir is the directory the Archiver writes into.
func (a *Archiver) Dir() string { return a.cfg.Dir }

// Archive writes and verifies the archive of [from, to) (see Write). A
// failure is logged as an error and counted; the caller must then keep
// the range's rows. An archive of the range that exists already is not a
// failure when it verifies: its manifest is returned (a retention job cut
// short between the write and the drop goes on). So a range is archived
// once nothing in it changes any more: rows written into it after its
// archive are not in it.
func (a *Archiver) Archive(ctx context.Context, from, to time.Time) (Manifest, error) {
	m, err := Write(ctx, a.cfg.Source, a.cfg.Dir, from, to)
	if errors.Is(err, ErrExists) {
		m, err = a.existing(ID(from, to))
	}
	a.setStatus(err)
	if err != nil {
		a.failures.Inc()
		a.cfg.Logger.Error("archive write failed; the range is kept", "from", from.UTC(), "to", to.UTC(),
			"dir", a.cfg.Dir, "err", err)
		return Manifest{}, err
	}
	a.lastSuccess.Set(float64(time.Now().Unix()))
	a.cfg.Logger.Info("archive written and verified", "archive", m.ID, "events", m.Rows("events"),
		"deliveries", m.Rows("deliveries"), "attempts", m.Rows("attempts"), "dead_letters", m.Rows("dead_letters"),
		"bytes", m.Bytes())
	return m, nil
}

// existing verifies the archive id already in the directory.
func (a *Archiver) existing(id string) (Manifest, error) {
	dir := filepath.Join(a.cfg.Dir, id)
	m, err := ReadManifest(dir)
	if err != nil {
		return m, err
	}
	return m, Verify(dir, m)
}
