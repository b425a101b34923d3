package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/redisurl"
	"github.com/webhookd/webhookd/outbox"
)

// Config is everything webhookd reads from its environment and flags. Each
// field's comment names its variable and default.
type Config struct {
	DatabaseURL          string        // WEBHOOKD_DATABASE_URL; postgres://postgres@127.0.0.1:5432/webhookd?sslmode=disable
	RedisURL             string        // WEBHOOKD_REDIS_URL; redis://127.0.0.1:6379/0 (or redis-sentinel://, redis-cluster://: internal/redisurl)
	APIAddr              string        // WEBHOOKD_API_ADDR; :8080
	DashboardAddr        string        // WEBHOOKD_DASHBOARD_ADDR; :8081
	AdminToken           string        // WEBHOOKD_ADMIN_TOKEN; random, printed once at start
	RetrySchedule        string        // WEBHOOKD_RETRY_SCHEDULE; 1m,15m,1h,24h
	AllowPrivateNetworks bool          // WEBHOOKD_ALLOW_PRIVATE_NETWORKS; false
	ConnectTimeout       time.Duration // WEBHOOKD_CONNECT_TIMEOUT; 10s
	ResponseTimeout      time.Duration // WEBHOOKD_RESPONSE_TIMEOUT; 30s
	Retention            time.Duration // WEBHOOKD_RETENTION; 336h
	MaxPayloadBytes      int64         // WEBHOOKD_MAX_PAYLOAD_BYTES; 65536
	MaxBatchBytes        int64         // WEBHOOKD_MAX_BATCH_BYTES; 1048576
	MaxBulkBytes         int64         // WEBHOOKD_MAX_BULK_BYTES; 67108864
	MaxBulkEvents        int           // WEBHOOKD_MAX_BULK_EVENTS; 100000
	WorkerConcurrency    int           // WEBHOOKD_WORKER_CONCURRENCY; 500
	EndpointInitialLimit int           // WEBHOOKD_ENDPOINT_INITIAL_LIMIT; 10
	CircuitAfter         int           // WEBHOOKD_CIRCUIT_AFTER; 10 (0: no circuit breaker)
	CircuitProbes        string        // WEBHOOKD_CIRCUIT_PROBES; 30s,1m,2m,5m,10m (the last repeats)
	EndpointDisableAfter time.Duration // WEBHOOKD_ENDPOINT_DISABLE_AFTER; 120h (0: never)
	DatabaseMaxConns     int           // WEBHOOKD_DATABASE_MAX_CONNS; 20
	ReconcileInterval    time.Duration // WEBHOOKD_RECONCILE_INTERVAL; 2s
	TransformTimeout     time.Duration // WEBHOOKD_TRANSFORM_TIMEOUT; 50ms: an endpoint's transformation's budget per run
	LogLevel             string        // WEBHOOKD_LOG_LEVEL; info
	TrustedProxies       string        // WEBHOOKD_TRUSTED_PROXIES; none (comma-separated CIDRs or addresses)
	LogFormat            string        // WEBHOOKD_LOG_FORMAT; "" (JSON lines, text on a terminal), json or text
	RequestTimeout       time.Duration // WEBHOOKD_REQUEST_TIMEOUT; 30s
	DrainTimeout         time.Duration // WEBHOOKD_DRAIN_TIMEOUT; 30s: on SIGTERM, the wait for requests in flight before their connections are closed
	EncryptionKey        string        // WEBHOOKD_ENCRYPTION_KEY; none: secrets stored in clear
	PortalBaseURL        string        // WEBHOOKD_PORTAL_BASE_URL; the dashboard's address: where portal links point
	PortalFrameAncestors string        // WEBHOOKD_PORTAL_FRAME_ANCESTORS; none: origins that may frame the portal
	OutboxSources        string        // WEBHOOKD_OUTBOX_SOURCES; none: space-separated PROJECT=DATABASE_URL whose webhookd_outbox the workers move
	ArchiveDir           string        // WEBHOOKD_ARCHIVE_DIR; none: nothing is archived (the directory of archives, SPEC §4)
}

// trustedProxies parses TrustedProxies; Validate reports its errors.
func (c Config) trustedProxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(c.TrustedProxies, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if a, err := netip.ParseAddr(f); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("WEBHOOKD_TRUSTED_PROXIES: %q is neither an address nor a CIDR prefix", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		DatabaseURL:          "postgres://postgres@127.0.0.1:5432/webhookd?sslmode=disable",
		RedisURL:             "redis://127.0.0.1:6379/0",
		APIAddr:              ":8080",
		DashboardAddr:        ":8081",
		RetrySchedule:        "1m,15m,1h,24h",
		CircuitAfter:         10,
		CircuitProbes:        "30s,1m,2m,5m,10m",
		EndpointDisableAfter: 120 * time.Hour,
		ConnectTimeout:       10 * time.Second,
		ResponseTimeout:      30 * time.Second,
		Retention:            336 * time.Hour,
		MaxPayloadBytes:      webhookd.DefaultMaxPayloadBytes,
		MaxBatchBytes:        1 << 20,
		MaxBulkBytes:         64 << 20,
		MaxBulkEvents:        100_000,
		WorkerConcurrency:    500,
		EndpointInitialLimit: 10,
		DatabaseMaxConns:     20,
		ReconcileInterval:    2 * time.Second,
		TransformTimeout:     50 * time.Millisecond,
		LogLevel:             "info",
		RequestTimeout:       30 * time.Second,
		DrainTimeout:         30 * time.Second,
	}
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.DatabaseURL == "":
		return errors.New("WEBHOOKD_DATABASE_URL is required")
	case c.TrustedProxies != "":
		if _, err := c.trustedProxies(); err != nil {
			return err
		}
	case c.RedisURL == "":
		return errors.New("WEBHOOKD_REDIS_URL is required")
	case redisURLError(c.RedisURL) != nil:
		return fmt.Errorf("WEBHOOKD_REDIS_URL: %w", redisURLError(c.RedisURL))
	case c.ConnectTimeout <= 0:
		return errors.New("WEBHOOKD_CONNECT_TIMEOUT must be positive")
	case c.ResponseTimeout <= 0:
		return errors.New("WEBHOOKD_RESPONSE_TIMEOUT must be positive")
	case c.Retention <= 0:
		return errors.New("WEBHOOKD_RETENTION must be positive")
	case c.MaxPayloadBytes < 1024:
		return errors.New("WEBHOOKD_MAX_PAYLOAD_BYTES must be at least 1024")
	case c.MaxBatchBytes < c.MaxPayloadBytes:
		return errors.New("WEBHOOKD_MAX_BATCH_BYTES must be at least WEBHOOKD_MAX_PAYLOAD_BYTES")
	case c.MaxBulkBytes < c.MaxPayloadBytes:
		return errors.New("WEBHOOKD_MAX_BULK_BYTES must be at least WEBHOOKD_MAX_PAYLOAD_BYTES")
	case c.MaxBulkEvents < 1:
		return errors.New("WEBHOOKD_MAX_BULK_EVENTS must be at least 1")
	case c.WorkerConcurrency < 1:
		return errors.New("WEBHOOKD_WORKER_CONCURRENCY must be at least 1")
	case c.EndpointInitialLimit < 1:
		return errors.New("WEBHOOKD_ENDPOINT_INITIAL_LIMIT must be at least 1")
	case c.CircuitAfter < 0:
		return errors.New("WEBHOOKD_CIRCUIT_AFTER must not be negative (0 turns the circuit breaker off)")
	case c.EndpointDisableAfter < 0:
		return errors.New("WEBHOOKD_ENDPOINT_DISABLE_AFTER must not be negative (0: never)")
	case c.TransformTimeout <= 0 || c.TransformTimeout > 10*time.Second:
		return errors.New("WEBHOOKD_TRANSFORM_TIMEOUT must be positive and at most 10s")
	case c.DatabaseMaxConns < 4:
		return errors.New("WEBHOOKD_DATABASE_MAX_CONNS must be at least 4")
	case c.RequestTimeout <= 0:
		return errors.New("WEBHOOKD_REQUEST_TIMEOUT must be positive")
	case c.DrainTimeout <= 0:
		return errors.New("WEBHOOKD_DRAIN_TIMEOUT must be positive")
	case c.ReconcileInterval <= 0:
		return errors.New("WEBHOOKD_RECONCILE_INTERVAL must be positive")
	case c.LogFormat != "" && c.LogFormat != "json" && c.LogFormat != "text":
		return errors.New("WEBHOOKD_LOG_FORMAT must be json or text (or unset: JSON lines, text on a terminal)")
	case new(slog.Level).UnmarshalText([]byte(c.LogLevel)) != nil:
		return errors.New("WEBHOOKD_LOG_LEVEL must be debug, info, warn or error")
	case outboxSourcesError(c.OutboxSources) != nil:
		return fmt.Errorf("WEBHOOKD_OUTBOX_SOURCES: %w", outboxSourcesError(c.OutboxSources))
	case c.AdminToken != "" && len(c.AdminToken) < 16:
		return errors.New("WEBHOOKD_ADMIN_TOKEN must be at least 16 characters (or unset, for a generated one)")
	}
	return nil
}

// outboxSourcesError says what is wrong with WEBHOOKD_OUTBOX_SOURCES, if
// anything.
func outboxSourcesError(s string) error {
	_, err := outbox.ParseSources(s)
	return err
}

// redisURLError says what is wrong with a Redis URL, if anything.
func redisURLError(u string) error {
	_, err := redisurl.Parse(u)
	return err
}

// setting is one Config field as a flag and an environment variable.
type setting struct {
	flag, env string
	secrecy   secrecy
	usage     string // the value's placeholder in backquotes
	field     func(c *Config) any
}

// settings lists every setting; a command takes those of them it uses.
var settings = []setting{
	{"database-url", "WEBHOOKD_DATABASE_URL", secretURL, "PostgreSQL `URL`", func(c *Config) any { return &c.DatabaseURL }},
	{"database-max-conns", "WEBHOOKD_DATABASE_MAX_CONNS", plain, "PostgreSQL connections per process (`N`)", func(c *Config) any { return &c.DatabaseMaxConns }},
	{"redis-url", "WEBHOOKD_REDIS_URL", secretURL, "Redis `URL`: redis://, rediss://, redis-sentinel:// or redis-cluster://", func(c *Config) any { return &c.RedisURL }},
	{"api-addr", "WEBHOOKD_API_ADDR", plain, "public API listen address (`HOST:PORT`)", func(c *Config) any { return &c.APIAddr }},
	{"dashboard-addr", "WEBHOOKD_DASHBOARD_ADDR", plain, "listen address (`HOST:PORT`) of /healthz, /readyz, /metrics and the dashboard", func(c *Config) any { return &c.DashboardAddr }},
	{"admin-token", "WEBHOOKD_ADMIN_TOKEN", secret, "dashboard admin `TOKEN`, at least 16 characters (unset: a random one, printed once in the log)", func(c *Config) any { return &c.AdminToken }},
	{"encryption-key", "WEBHOOKD_ENCRYPTION_KEY", secret, "`ID:BASE64KEY[,ID:BASE64KEY]`: encrypt endpoint secrets at rest with the first (unset: stored in clear)", func(c *Config) any { return &c.EncryptionKey }},
	{"allow-private-networks", "WEBHOOKD_ALLOW_PRIVATE_NETWORKS", plain, "let endpoints use loopback and private addresses", func(c *Config) any { return &c.AllowPrivateNetworks }},
	{"retry-schedule", "WEBHOOKD_RETRY_SCHEDULE", plain, "delays between attempts (`LIST`)", func(c *Config) any { return &c.RetrySchedule }},
	{"connect-timeout", "WEBHOOKD_CONNECT_TIMEOUT", plain, "delivery connect timeout (`DURATION`)", func(c *Config) any { return &c.ConnectTimeout }},
	{"response-timeout", "WEBHOOKD_RESPONSE_TIMEOUT", plain, "delivery response timeout (`DURATION`)", func(c *Config) any { return &c.ResponseTimeout }},
	{"retention", "WEBHOOKD_RETENTION", plain, "how long deliveries, attempts and dead letters are kept (`DURATION`)", func(c *Config) any { return &c.Retention }},
	{"worker-concurrency", "WEBHOOKD_WORKER_CONCURRENCY", plain, "parallel deliveries per worker (`N`)", func(c *Config) any { return &c.WorkerConcurrency }},
	{"endpoint-initial-limit", "WEBHOOKD_ENDPOINT_INITIAL_LIMIT", plain, "the concurrency limit an endpoint starts from per worker; it adapts up to the endpoint's max_in_flight (`N`)", func(c *Config) any { return &c.EndpointInitialLimit }},
	{"circuit-after", "WEBHOOKD_CIRCUIT_AFTER", plain, "consecutive failed attempts that open an endpoint's circuit; 0: no circuit breaker (`N`)", func(c *Config) any { return &c.CircuitAfter }},
	{"circuit-probes", "WEBHOOKD_CIRCUIT_PROBES", plain, "waits before each probe of an open circuit, the last repeating (`LIST`)", func(c *Config) any { return &c.CircuitProbes }},
	{"endpoint-disable-after", "WEBHOOKD_ENDPOINT_DISABLE_AFTER", plain, "disable an endpoint with no successful attempt for this long while its attempts fail; 0: never (`DURATION`)", func(c *Config) any { return &c.EndpointDisableAfter }},
	{"reconcile-interval", "WEBHOOKD_RECONCILE_INTERVAL", plain, "how often due deliveries without a task are enqueued again (`DURATION`)", func(c *Config) any { return &c.ReconcileInterval }},
	{"transform-timeout", "WEBHOOKD_TRANSFORM_TIMEOUT", plain, "how long an endpoint's transformation may run for one delivery (`DURATION`)", func(c *Config) any { return &c.TransformTimeout }},
	{"max-payload-bytes", "WEBHOOKD_MAX_PAYLOAD_BYTES", plain, "largest request body, and largest body a transformation may make (`BYTES`)", func(c *Config) any { return &c.MaxPayloadBytes }},
	{"max-batch-bytes", "WEBHOOKD_MAX_BATCH_BYTES", plain, "largest batch request body (`BYTES`)", func(c *Config) any { return &c.MaxBatchBytes }},
	{"max-bulk-bytes", "WEBHOOKD_MAX_BULK_BYTES", plain, "largest bulk (NDJSON) request body (`BYTES`)", func(c *Config) any { return &c.MaxBulkBytes }},
	{"max-bulk-events", "WEBHOOKD_MAX_BULK_EVENTS", plain, "most events (lines) in one bulk request (`N`)", func(c *Config) any { return &c.MaxBulkEvents }},
	{"trusted-proxies", "WEBHOOKD_TRUSTED_PROXIES", plain, "proxies (addresses or CIDRs, comma-separated: `LIST`) whose X-Forwarded-For is believed", func(c *Config) any { return &c.TrustedProxies }},
	{"request-timeout", "WEBHOOKD_REQUEST_TIMEOUT", plain, "longest an API request may take before it answers 503 timeout (`DURATION`)", func(c *Config) any { return &c.RequestTimeout }},
	{"drain-timeout", "WEBHOOKD_DRAIN_TIMEOUT", plain, "on SIGTERM, how long the listeners wait for requests in flight before closing their connections (`DURATION`)", func(c *Config) any { return &c.DrainTimeout }},
	{"portal-base-url", "WEBHOOKD_PORTAL_BASE_URL", plain, "where portal links point (`URL`; default: the dashboard's address)", func(c *Config) any { return &c.PortalBaseURL }},
	{"portal-frame-ancestors", "WEBHOOKD_PORTAL_FRAME_ANCESTORS", plain, "origins, comma-separated, whose pages may frame the portal (`LIST`)", func(c *Config) any { return &c.PortalFrameAncestors }},
	{"outbox-sources", "WEBHOOKD_OUTBOX_SOURCES", secret, "service databases whose webhookd_outbox the worker moves: space-separated `PROJECT=DATABASE_URL` entries", func(c *Config) any { return &c.OutboxSources }},
	{"archive-dir", "WEBHOOKD_ARCHIVE_DIR", plain, "`DIR` of the archives of history kept past retention, which webhookd archive reads (none: no archive)", func(c *Config) any { return &c.ArchiveDir }},
	{"log-level", "WEBHOOKD_LOG_LEVEL", plain, "`LEVEL`: debug, info, warn or error", func(c *Config) any { return &c.LogLevel }},
	{"log-format", "WEBHOOKD_LOG_FORMAT", plain, "`FORMAT`: json or text (default: JSON lines, text on a terminal)", func(c *Config) any { return &c.LogFormat }},
}

// bind defines on f a flag for each setting named (by flag name), each
// defaulting to its environment variable, or else to c's value.
func (c *Config) bind(f *flagSet, names []string) {
	for _, name := range names {
		i := slices.IndexFunc(settings, func(s setting) bool { return s.flag == name })
		if i < 0 {
			panic("no setting " + name)
		}
		s := settings[i]
		switch p := s.field(c).(type) {
		case *string:
			f.String(p, s.flag, s.env, s.secrecy, s.usage)
		case *int:
			f.Int(p, s.flag, s.env, s.usage)
		case *int64:
			f.Int64(p, s.flag, s.env, s.usage)
		case *bool:
			f.Bool(p, s.flag, s.env, s.usage)
		case *time.Duration:
			f.Duration(p, s.flag, s.env, s.usage)
		}
	}
}
