// Package api serves webhookd's public JSON API (SPEC §2): events,
// endpoints, deliveries, dead letters and jobs, behind API-key auth, a
// per-project rate limit shared through Redis, and Idempotency-Key records
// kept in PostgreSQL.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/tracing"
	"github.com/webhookd/webhookd/internal/warm"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
)

// Config configures a Server. Zero values take the defaults named in each
// field's comment.
type Config struct {
	DB       *storage.DB           // required
	Redis    redis.UniversalClient // required for rate limits; errors fail open
	Enqueuer webhookd.Enqueuer     // hands committed work to the queue; nil (tests): the reconcilers pick it up, redeliveries are skipped
	Clock    webhookd.Clock        // default webhookd.SystemClock
	Logger   *slog.Logger          // default slog.Default()
	Metrics  prometheus.Registerer // default: a private registry
	// MaxPayloadBytes caps a request body (and each batch item's data),
	// and the body an endpoint's transformation makes when tried;
	// default 65536.
	MaxPayloadBytes int64
	// MaxBatchBytes caps the body of POST /v1/events/batch; default 1 MiB.
	MaxBatchBytes int64
	// MaxBulkBytes caps the body of POST /v1/events/bulk; default 64 MiB.
	MaxBulkBytes int64
	// MaxBulkEvents caps the events (lines) of one bulk body; default
	// 100,000.
	MaxBulkEvents int
	// IdempotencyWait is how long a repeat waits for a concurrent first
	// request with the same key; default 10s.
	IdempotencyWait time.Duration
	// AllowPrivateNetworks lets endpoint URLs name loopback and private
	// addresses (local development and tests); default false.
	AllowPrivateNetworks bool
	// RateLimitPrefix prefixes the Redis keys of the limiter; default
	// "webhookd:ratelimit:".
	RateLimitPrefix string
	// KeyCacheTTL is how long an API key's project (or its absence) is
	// reused without asking PostgreSQL; default DefaultKeyCacheTTL. A
	// revocation announced with PublishKeyRevoked applies at once.
	KeyCacheTTL time.Duration
	// RateLimitWindow is the period a project's per-minute limit (and the
	// unauthenticated one) counts over; default one minute, as SPEC §2
	// says. Tests shorten it so that a loop of several times a limit runs
	// in seconds, with the same headers and 429s as a real minute.
	RateLimitWindow time.Duration
	// UnauthenticatedRateLimit is the limit per minute per client address
	// on requests whose key is missing, bad, or not yet in the key cache
	// (before PostgreSQL is asked); default 6000.
	UnauthenticatedRateLimit int
	// TrustedProxies are the proxies whose X-Forwarded-For names the
	// client address the unauthenticated rate limit counts by; default
	// none (the peer address counts).
	TrustedProxies []netip.Prefix
	// IngestGroups is how many groups of event requests may commit at
	// once (storage.Ingester; more than one only while many events wait):
	// requests arriving meanwhile wait for the next group and share its
	// transaction. Default 4.
	IngestGroups int
	// RedisTimeout bounds each limiter call so a slow Redis cannot stall the
	// API; default 250ms.
	RedisTimeout time.Duration
	// RequestTimeout bounds a request: past it the API answers 503 timeout
	// and the work goes on (timeout.go); default 30s.
	RequestTimeout time.Duration
	// PortalBaseURL is where the links POST /v1/portal-sessions makes
	// point (the dashboard's URL, or WEBHOOKD_PORTAL_BASE_URL); default
	// "": links are paths only.
	PortalBaseURL string
	// Tracer makes each request a span, continuing the caller's
	// traceparent, and each write of events a span whose traceparent the
	// events keep for their attempts; default nil: no tracing. Log lines
	// carry the ids when Logger is Tracer.Logger's.
	Tracer *tracing.Tracer
	// TransformTimeout is how long an endpoint's transformation may run
	// when it is checked or tried (WEBHOOKD_TRANSFORM_TIMEOUT); default
	// transform.DefaultBudget (50ms).
	TransformTimeout time.Duration
	// Relay holds the streams of `webhookd listen` (GET
	// /v1/relays/{name}/stream; package relay's Hub); nil: that route
	// answers 404 not_found.
	Relay RelayStreams
}

// RelayStreams serves a `webhookd listen` stream for an authenticated
// project's relay: it takes the connection over (a WebSocket) until the
// stream ends.
type RelayStreams interface {
	Serve(w http.ResponseWriter, r *http.Request, project, name string)
}

// WithDefaults fills zero values.
func (c Config) WithDefaults() Config {
	if c.Clock == nil {
		c.Clock = webhookd.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = webhookd.DefaultMaxPayloadBytes
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 1 << 20
	}
	if c.MaxBulkBytes == 0 {
		c.MaxBulkBytes = 64 << 20
	}
	if c.MaxBulkEvents == 0 {
		c.MaxBulkEvents = 100_000
	}
	if c.IngestGroups <= 0 {
		c.IngestGroups = 4
	}
	if c.IdempotencyWait == 0 {
		c.IdempotencyWait = 10 * time.Second
	}
	if c.RateLimitPrefix == "" {
		c.RateLimitPrefix = "webhookd:ratelimit:"
	}
	if c.UnauthenticatedRateLimit == 0 {
		c.UnauthenticatedRateLimit = 6000
	}
	if c.RateLimitWindow == 0 {
		c.RateLimitWindow = time.Minute
	}
	if c.KeyCacheTTL == 0 {
		c.KeyCacheTTL = DefaultKeyCacheTTL
	}
	if c.RedisTimeout == 0 {
		c.RedisTimeout = 250 * time.Millisecond
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.TransformTimeout == 0 {
		c.TransformTimeout = transform.DefaultBudget
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.DB == nil:
		return errors.New("api config: DB is required")
	case c.Redis == nil:
		return errors.New("api config: Redis is required")
	case c.MaxPayloadBytes < 1024:
		return fmt.Errorf("api config: MaxPayloadBytes %d is below 1024", c.MaxPayloadBytes)
	case c.MaxBatchBytes < c.MaxPayloadBytes:
		return fmt.Errorf("api config: MaxBatchBytes %d is below MaxPayloadBytes", c.MaxBatchBytes)
	case c.MaxBulkBytes < 0:
		return errors.New("api config: MaxBulkBytes is negative")
	case c.MaxBulkEvents < 0:
		return errors.New("api config: MaxBulkEvents is negative")
	case c.IdempotencyWait < 0:
		return errors.New("api config: IdempotencyWait is negative")
	case c.RequestTimeout < 0:
		return errors.New("api config: RequestTimeout is negative")
	case c.TransformTimeout < 0:
		return errors.New("api config: TransformTimeout is negative")
	case c.RateLimitWindow < 0:
		return errors.New("api config: RateLimitWindow is negative")
	}
	return nil
}

// Server is the public API.
type Server struct {
	cfg     Config
	db      *storage.DB
	log     *slog.Logger
	clock   webhookd.Clock
	limiter *rateLimiter
	// handoff stops handing new deliveries to Redis while it does not
	// take them (redis_gate.go); the limiter has a gate of its own, so
	// that a limiter call over its short timeout delays no delivery.
	handoff redisGate
	// deferred counts new deliveries left to the reconciler because Redis
	// could not take them.
	deferred prometheus.Counter
	// ingester writes event requests, in groups.
	ingester *storage.Ingester
	// work counts the requests whose handlers still run, including
	// those answered already and still handing deliveries to the queue.
	work sync.WaitGroup
	// warm runs the handlers (timeout.go) on goroutines that outlive a
	// request, so their stacks grow once rather than on every request.
	warm *warm.Pool
	keys *keyCache
	// eventChecker reads and checks event objects, against the event-type
	// catalog's schemas among the rest (schemas.go).
	*eventChecker
	// transforms checks and tries endpoints' transformations.
	transforms *transform.Engine
	stop       context.CancelFunc // ends the key-revocation watch
	// watching is closed once the key-revocation watch has subscribed
	// and dropped what was cached before (tests wait for it: a key cached
	// before that is dropped then).
	watching chan struct{}
	mux      *http.ServeMux
	// streams are the routes that take their connection over (relay
	// streams) or read their body as a stream (bulk jobs): served with
	// auth and the rate limit, outside the request bound and the buffered
	// answer of handler.
	streams *http.ServeMux
	handler http.Handler // mux, counted (metrics.go), bounded in time (timeout.go)
	// patterns are the routes registered, in order (for the test that
	// holds them and the OpenAPI document together).
	patterns []string
}

// New builds a Server from cfg (after WithDefaults).
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, db: cfg.DB, log: cfg.Logger, clock: cfg.Clock, mux: http.NewServeMux(), keys: newKeyCache(),
		eventChecker: newEventChecker(cfg.DB, cfg.MaxPayloadBytes), warm: warm.New(time.Minute),
		transforms: transform.NewEngine(transform.Config{Budget: cfg.TransformTimeout, MaxOutput: int(cfg.MaxPayloadBytes)}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhookd_api_enqueue_deferred_total",
			Help: "New deliveries not handed to Redis after their commit (it could not be reached); the reconciler enqueues them.",
		})}
	if err := cfg.Metrics.Register(s.deferred); err != nil {
		return nil, err
	}
	var err error
	if s.limiter, err = newRateLimiter(cfg.Redis, cfg.RateLimitPrefix, cfg.RateLimitWindow, cfg.RedisTimeout, cfg.Logger, cfg.Metrics); err != nil {
		return nil, err
	}
	s.ingester = cfg.DB.NewIngester(cfg.IngestGroups)
	s.routes()
	if s.handler, err = s.instrument(s.mux); err != nil {
		return nil, err
	}
	if s.handler, err = s.bounded(s.handler); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.watching = make(chan struct{})
	go watchRevocations(ctx, cfg.Redis, s.keys, s.log, s.watching)
	return s, nil
}

// Close stops the Server's background work (the watch for key
// revocations announced by other processes).
func (s *Server) Close() { s.stop() }

// Wait blocks until the handlers of every request received so far have
// returned, including what they do after the answer is sent (handing the
// deliveries to the queue). A process stopping calls it once its listener
// is shut down.
func (s *Server) Wait() {
	s.work.Wait()
	s.limiter.refills.Wait()
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.RequestURI == "*" { // ServeMux answers this target (but OPTIONS, which net/http takes) a bare 400
		requestID := storage.NewRequestID()
		w.Header().Set("X-Request-Id", requestID)
		status, body := errorResponse(&webhookd.Error{Code: webhookd.CodeNotFound, Message: "no such route"}, requestID)
		writeBody(w, status, body)
		return
	}
	if strings.HasPrefix(r.URL.Path, relaysPrefix) || r.URL.Path == bulkPath { // the stream routes; a mux lookup for every request cost 0.4 % of ingest's CPU
		if _, pattern := s.streams.Handler(r); pattern != "" {
			s.streams.ServeHTTP(w, r) // which sets the path's values, as Handler does not
			return
		}
	}
	s.handler.ServeHTTP(w, r)
}

// relaysPrefix begins the path of every stream route.
const relaysPrefix = "/v1/relays/"

// RedisDegraded reports whether the limiter's or the hand-off's last call
// to Redis failed (for /readyz).
func (s *Server) RedisDegraded() bool { return s.limiter.gate.down() || s.handoff.down() }

func (s *Server) routes() {
	if s.streams == nil {
		s.streams = http.NewServeMux()
	}
	p := s.cfg.MaxPayloadBytes
	s.handle("POST /v1/events", s.events(p, false))
	s.handle("POST /v1/events/batch", s.events(s.cfg.MaxBatchBytes, true))
	s.handleOn(s.streams, "POST "+bulkPath, s.bulk)
	s.handle("GET /v1/events/{id}", s.plain(s.getEvent))
	s.handle("POST /v1/endpoints", s.idempotent(p, s.createEndpoint))
	s.handle("GET /v1/endpoints", s.plain(s.listEndpoints))
	s.handle("GET /v1/endpoints/{id}", s.plain(s.getEndpoint))
	s.handle("PATCH /v1/endpoints/{id}", s.withBody(p, s.patchEndpoint))
	s.handle("DELETE /v1/endpoints/{id}", s.plain(s.deleteEndpoint))
	s.handle("GET /v1/endpoints/{id}/secret", s.plain(s.getSecret))
	s.handle("POST /v1/endpoints/{id}/rotate-secret", s.idempotent(p, s.rotateSecret))
	s.handle("POST /v1/endpoints/{id}/test", s.withBody(p, s.testEndpoint))
	s.handle("POST /v1/endpoints/{id}/filter/test", s.withBody(p, s.testFilter))
	s.handle("POST /v1/endpoints/{id}/transformation/test", s.withBody(p, s.testTransformation))
	s.handle("GET /v1/deliveries", s.plain(s.listDeliveries))
	s.handle("GET /v1/deliveries/{id}", s.plain(s.getDelivery))
	s.handle("POST /v1/deliveries/{id}/redeliver", s.idempotent(p, s.redeliver))
	s.handle("GET /v1/dead-letters", s.plain(s.listDeadLetters))
	s.handle("POST /v1/dead-letters/replay", s.idempotent(p, s.replayDeadLetters))
	s.handle("GET /v1/jobs/{id}", s.plain(s.getJob))
	s.handle("GET /v1/jobs/{id}/errors", s.getJobErrors)
	s.handle("POST /v1/jobs/{id}/cancel", s.idempotent(p, s.cancelJob))
	s.handle("POST /v1/portal-sessions", s.idempotent(p, s.createPortalSession))
	s.handle("POST /v1/event-types", s.idempotent(p, s.createEventType))
	s.handle("GET /v1/event-types", s.plain(s.listEventTypes))
	s.handle("GET /v1/event-types/{name}", s.plain(s.getEventType))
	s.handle("PATCH /v1/event-types/{name}", s.withBody(p, s.patchEventType))
	s.handle("DELETE /v1/event-types/{name}", s.plain(s.deleteEventType))
	s.handleOn(s.streams, "GET /v1/relays/{name}/stream", s.relayStream)
	s.public("GET /v1/openapi.json", serveOpenAPI)
	s.handle("/", s.plain(s.noRoute)) // 404, or 405 with Allow
}
