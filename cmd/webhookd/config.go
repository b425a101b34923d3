package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/webhookd/webhookd/internal/redisurl"
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
	WorkerConcurrency    int           // WEBHOOKD_WORKER_CONCURRENCY; 500
	EndpointMaxInFlight  int           // WEBHOOKD_ENDPOINT_MAX_IN_FLIGHT; 10
	DatabaseMaxConns     int           // WEBHOOKD_DATABASE_MAX_CONNS; 20
	ReconcileInterval    time.Duration // WEBHOOKD_RECONCILE_INTERVAL; 5s
	LogLevel             string        // WEBHOOKD_LOG_LEVEL; info
	TrustedProxies       string        // WEBHOOKD_TRUSTED_PROXIES; none (comma-separated CIDRs or addresses)
	LogFormat            string        // WEBHOOKD_LOG_FORMAT; "" (JSON lines, text on a terminal), json or text
	RequestTimeout       time.Duration // WEBHOOKD_REQUEST_TIMEOUT; 30s
	DrainTimeout         time.Duration // WEBHOOKD_DRAIN_TIMEOUT; 30s: on SIGTERM, the wait for requests in flight before their connections are closed
	EncryptionKey        string        // WEBHOOKD_ENCRYPTION_KEY; none: secrets stored in clear
	PortalBaseURL        string        // WEBHOOKD_PORTAL_BASE_URL; the dashboard's address: where portal links point
	PortalFrameAncestors string        // WEBHOOKD_PORTAL_FRAME_ANCESTORS; none: origins that may frame the portal
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
		DatabaseURL:         "postgres://postgres@127.0.0.1:5432/webhookd?sslmode=disable",
		RedisURL:            "redis://127.0.0.1:6379/0",
		APIAddr:             ":8080",
		DashboardAddr:       ":8081",
		RetrySchedule:       "1m,15m,1h,24h",
		ConnectTimeout:      10 * time.Second,
		ResponseTimeout:     30 * time.Second,
		Retention:           336 * time.Hour,
		MaxPayloadBytes:     65536,
		MaxBatchBytes:       1 << 20,
		WorkerConcurrency:   500,
		EndpointMaxInFlight: 10,
		DatabaseMaxConns:    20,
		ReconcileInterval:   5 * time.Second,
		LogLevel:            "info",
		RequestTimeout:      30 * time.Second,
		DrainTimeout:        30 * time.Second,
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
	case c.WorkerConcurrency < 1:
		return errors.New("WEBHOOKD_WORKER_CONCURRENCY must be at least 1")
	case c.EndpointMaxInFlight < 1:
		return errors.New("WEBHOOKD_ENDPOINT_MAX_IN_FLIGHT must be at least 1")
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
	case c.AdminToken != "" && len(c.AdminToken) < 16:
		return errors.New("WEBHOOKD_ADMIN_TOKEN must be at least 16 characters (or unset, for a generated one)")
	}
	return nil
}

// redisURLError says what is wrong with a Redis URL, if anything.
func redisURLError(u string) error {
	_, err := redisurl.Parse(u)
	return err
}

// bind registers a flag for every setting on fs, each defaulting to its
// environment variable (or the built-in default). Bad environment values
// are reported by the returned func after parsing.
func (c *Config) bind(fs *flag.FlagSet, getenv func(string) string) func() error {
	var errs []error
	str := func(p *string, flagName, env, usage string) {
		if v := getenv(env); v != "" {
			*p = v
		}
		fs.StringVar(p, flagName, *p, usage+" ("+env+")")
	}
	dur := func(p *time.Duration, flagName, env, usage string) {
		if v := getenv(env); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			}
			*p = d
		}
		fs.DurationVar(p, flagName, *p, usage+" ("+env+")")
	}
	i64 := func(p *int64, flagName, env, usage string) {
		if v := getenv(env); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			}
			*p = n
		}
		fs.Int64Var(p, flagName, *p, usage+" ("+env+")")
	}
	str(&c.DatabaseURL, "database-url", "WEBHOOKD_DATABASE_URL", "PostgreSQL URL")
	str(&c.RedisURL, "redis-url", "WEBHOOKD_REDIS_URL", "Redis URL")
	str(&c.APIAddr, "api-addr", "WEBHOOKD_API_ADDR", "public API listen address")
	str(&c.DashboardAddr, "dashboard-addr", "WEBHOOKD_DASHBOARD_ADDR", "dashboard listen address")
	str(&c.AdminToken, "admin-token", "WEBHOOKD_ADMIN_TOKEN", "dashboard admin token")
	str(&c.RetrySchedule, "retry-schedule", "WEBHOOKD_RETRY_SCHEDULE", "delays between attempts")
	str(&c.LogLevel, "log-level", "WEBHOOKD_LOG_LEVEL", "debug, info, warn or error")
	str(&c.TrustedProxies, "trusted-proxies", "WEBHOOKD_TRUSTED_PROXIES",
		"proxies (addresses or CIDRs, comma-separated) whose X-Forwarded-For is believed")
	str(&c.EncryptionKey, "encryption-key", "WEBHOOKD_ENCRYPTION_KEY", "ID:BASE64KEY[,ID:BASE64KEY]: encrypt endpoint secrets at rest with the first")
	str(&c.PortalBaseURL, "portal-base-url", "WEBHOOKD_PORTAL_BASE_URL", "where portal links point (default: the dashboard's address)")
	str(&c.PortalFrameAncestors, "portal-frame-ancestors", "WEBHOOKD_PORTAL_FRAME_ANCESTORS", "origins, comma-separated, whose pages may frame the portal")
	str(&c.LogFormat, "log-format", "WEBHOOKD_LOG_FORMAT", "json or text (default: JSON lines, text on a terminal)")
	if v := getenv("WEBHOOKD_ALLOW_PRIVATE_NETWORKS"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("WEBHOOKD_ALLOW_PRIVATE_NETWORKS: %w", err))
		}
		c.AllowPrivateNetworks = b
	}
	fs.BoolVar(&c.AllowPrivateNetworks, "allow-private-networks", c.AllowPrivateNetworks,
		"let endpoints use loopback and private addresses (WEBHOOKD_ALLOW_PRIVATE_NETWORKS)")
	dur(&c.ConnectTimeout, "connect-timeout", "WEBHOOKD_CONNECT_TIMEOUT", "delivery connect timeout")
	dur(&c.ResponseTimeout, "response-timeout", "WEBHOOKD_RESPONSE_TIMEOUT", "delivery response timeout")
	dur(&c.Retention, "retention", "WEBHOOKD_RETENTION", "how long deliveries, attempts and dead letters are kept")
	i64(&c.MaxPayloadBytes, "max-payload-bytes", "WEBHOOKD_MAX_PAYLOAD_BYTES", "largest request body")
	i64(&c.MaxBatchBytes, "max-batch-bytes", "WEBHOOKD_MAX_BATCH_BYTES", "largest batch request body")
	dur(&c.RequestTimeout, "request-timeout", "WEBHOOKD_REQUEST_TIMEOUT", "longest an API request may take before it answers 503 timeout")
	dur(&c.DrainTimeout, "drain-timeout", "WEBHOOKD_DRAIN_TIMEOUT", "on SIGTERM, how long the listeners wait for requests in flight before closing their connections")
	dur(&c.ReconcileInterval, "reconcile-interval", "WEBHOOKD_RECONCILE_INTERVAL", "how often due deliveries without a task are re-enqueued")
	conc, perEndpoint, conns := int64(c.WorkerConcurrency), int64(c.EndpointMaxInFlight), int64(c.DatabaseMaxConns)
	i64(&conc, "worker-concurrency", "WEBHOOKD_WORKER_CONCURRENCY", "parallel deliveries per worker")
	i64(&perEndpoint, "endpoint-max-in-flight", "WEBHOOKD_ENDPOINT_MAX_IN_FLIGHT", "parallel deliveries per endpoint per worker")
	i64(&conns, "database-max-conns", "WEBHOOKD_DATABASE_MAX_CONNS", "PostgreSQL connections per process")
	return func() error {
		c.WorkerConcurrency, c.EndpointMaxInFlight, c.DatabaseMaxConns = int(conc), int(perEndpoint), int(conns)
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		return c.Validate()
	}
}
