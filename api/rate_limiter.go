package api

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// rateLimiter is the per-project request limit (SPEC §2), counted in Redis
// with GCRA so every serve process shares one counter. When Redis cannot be
// reached it fails open: the request goes through, a log line and a metric
// say so.
type rateLimiter struct {
	lim      *redis_rate.Limiter
	prefix   string
	window   time.Duration // what "per minute" counts over: a minute but in tests
	timeout  time.Duration
	log      *slog.Logger
	failOpen prometheus.Counter
	rejected prometheus.Counter
	gate     redisGate
}

func newRateLimiter(rdb redis.UniversalClient, prefix string, window, timeout time.Duration, log *slog.Logger, reg prometheus.Registerer) (*rateLimiter, error) {
	l := &rateLimiter{lim: redis_rate.NewLimiter(rdb), prefix: prefix, window: window, timeout: timeout, log: log,
		failOpen: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhookd_api_ratelimit_fail_open_total",
			Help: "API requests let through unlimited because Redis could not be reached.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhookd_api_rate_limited_total",
			Help: "API requests refused with 429 rate_limited.",
		})}
	for _, c := range []prometheus.Collector{l.failOpen, l.rejected} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// rateResult is one limiter decision and what the headers say.
type rateResult struct {
	allowed    bool
	limit      int
	remaining  int
	reset      time.Time
	retryAfter time.Duration
}

func (l *rateLimiter) allow(ctx context.Context, key string, perMinute int, now time.Time) rateResult {
	open := rateResult{allowed: true, limit: perMinute, remaining: perMinute, reset: now.Add(l.window)}
	if !l.gate.try(time.Now()) {
		l.failOpen.Inc()
		return open
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	res, err := l.lim.Allow(ctx, l.prefix+key, redis_rate.Limit{Rate: perMinute, Burst: perMinute, Period: l.window})
	if err != nil {
		l.failOpen.Inc()
		if l.gate.failed(time.Now()) {
			l.log.Warn("rate limiter cannot reach redis; letting requests through unlimited", "err", err)
		}
		return open
	}
	l.gate.succeeded()
	out := rateResult{allowed: res.Allowed > 0, limit: perMinute, remaining: res.Remaining,
		reset: now.Add(res.ResetAfter)}
	if !out.allowed {
		out.retryAfter = res.RetryAfter
		l.rejected.Inc()
	}
	return out
}

// setHeaders writes X-RateLimit-Limit, -Remaining and -Reset (Unix seconds,
// rounded up).
func (r rateResult) setHeaders(h http.Header) {
	h.Set("X-RateLimit-Limit", strconv.Itoa(r.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(r.remaining))
	reset := r.reset.Unix()
	if r.reset.Nanosecond() > 0 {
		reset++
	}
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
}

// retryAfterSeconds rounds up, and is at least 1.
func (r rateResult) retryAfterSeconds() int {
	s := int((r.retryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}
