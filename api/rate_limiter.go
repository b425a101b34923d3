package api

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// rateLimiter is the per-project request limit (SPEC §2), counted in Redis
// with GCRA so every serve process shares one counter. When Redis cannot be
// reached it fails open: the request goes through, a log line and a metric
// say so.
//
// A key that takes many requests a second is not asked of Redis once per
// request: the process takes a few of its tokens ahead (reserve), as many
// as came in the last reserveSlot, and lets the next requests through on
// them while a refill runs beside. Redis still counts every token, so the
// limit shared by all processes holds; a token taken ahead is only taken
// some milliseconds early, and one left unused is dropped, never given
// twice (a process under-admits by at most a slot's worth). A key with a
// few requests a slot goes to Redis for each, as before.
type rateLimiter struct {
	lim      *redis_rate.Limiter
	prefix   string
	window   time.Duration // what "per minute" counts over: a minute but in tests
	timeout  time.Duration
	log      *slog.Logger
	failOpen prometheus.Counter
	rejected prometheus.Counter
	gate     redisGate

	mu       sync.Mutex
	reserves map[string]*reserve
	swept    time.Time
	refills  sync.WaitGroup
}

// reserve is one key's tokens taken from Redis ahead, and the demand that
// says how many to take.
type reserve struct {
	tokens    int       // taken from Redis's count, not used yet
	remaining int       // what Redis had left after them
	reset     time.Time // the end of Redis's window as it said then (time.Now's clock)
	until     time.Time // tokens unused by then are dropped
	// settled is closed when the take ahead in flight ends; nil while none
	// is: one take ahead of a key at a time.
	settled  chan struct{}
	slot     time.Time // the start of the slot whose arrivals are counted
	arrivals int       // requests in that slot
	last     int       // requests in the slot before it
}

// Reservation tuning.
const (
	reserveSlot  = 10 * time.Millisecond // demand is counted per slot
	reserveMin   = 4                     // arrivals a slot before tokens are taken ahead
	reserveMax   = 64                    // the most taken ahead at once
	reserveFor   = time.Second           // a token taken ahead and unused by then is dropped
	reserveIdle  = time.Minute           // a key's reserve is forgotten after this long unused
	reserveWaits = 3                     // takes ahead a request waits for before it asks Redis itself
)

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
	out, ok, wait := l.fromReserve(key, perMinute, now, true)
	for waits := 0; wait != nil && waits < reserveWaits; waits++ {
		// Empty, and a take ahead is in flight: its tokens come sooner
		// than an answer to a call of this request's own.
		select {
		case <-wait:
		case <-ctx.Done():
		}
		out, ok, wait = l.fromReserve(key, perMinute, now, false)
	}
	if ok {
		return out
	}
	open := rateResult{allowed: true, limit: perMinute, remaining: perMinute, reset: now.Add(l.window)}
	if !l.gate.try(time.Now()) {
		l.failOpen.Inc()
		return open
	}
	ahead := l.demand(key, perMinute)
	res, err := l.take(ctx, key, perMinute, 1+ahead)
	if err != nil {
		if ahead > 0 {
			l.settle(key, nil, true)
		}
		return open
	}
	out = rateResult{allowed: res.Allowed > 0, limit: perMinute, remaining: res.Remaining,
		reset: now.Add(res.ResetAfter)}
	if out.allowed {
		res.Allowed-- // this request's
	} else {
		out.retryAfter = res.RetryAfter
		l.rejected.Inc()
	}
	if inHand := l.settle(key, res, ahead > 0); out.allowed {
		out.remaining += inHand
	}
	return out
}

// take asks Redis for n of key's tokens, as many as it has when fewer; an
// error (logged, counted, the gate told) means fail open. A caller that
// left (ctx ended: its client went away, perhaps while it waited for a
// take ahead) learns nothing of Redis, so its error does not count as
// Redis's: it would have every request skip the limit for a second.
func (l *rateLimiter) take(ctx context.Context, key string, perMinute, n int) (*redis_rate.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	limit := redis_rate.Limit{Rate: perMinute, Burst: perMinute, Period: l.window}
	var res *redis_rate.Result
	var err error
	if n == 1 {
		res, err = l.lim.Allow(ctx, l.prefix+key, limit)
	} else {
		res, err = l.lim.AllowAtMost(ctx, l.prefix+key, limit, n)
	}
	if err != nil && caller.Err() != nil {
		return nil, err
	}
	if err != nil {
		l.failOpen.Inc()
		if l.gate.failed(time.Now()) {
			l.log.Warn("rate limiter cannot reach redis; letting requests through unlimited", "err", err)
		}
		return nil, err
	}
	l.gate.succeeded()
	return res, nil
}

// aheadCap is the most tokens of a key limited to perMinute that a process
// may take ahead: a second's share of the limit, at most reserveMax; 0 (a
// small limit) means never.
func aheadCap(perMinute int) int {
	if c := min(perMinute/60, reserveMax); c >= reserveMin {
		return c
	}
	return 0
}

// reserveLocked returns key's reserve, counting one request's arrival at
// now if arrival; nil for a key whose limit is too small to take tokens
// ahead.
func (l *rateLimiter) reserveLocked(key string, perMinute int, now time.Time, arrival bool) *reserve {
	if aheadCap(perMinute) == 0 {
		return nil
	}
	if now.Sub(l.swept) >= reserveIdle {
		for k, r := range l.reserves {
			if now.Sub(r.slot) >= reserveIdle && r.settled == nil {
				delete(l.reserves, k)
			}
		}
		l.swept = now
	}
	r, ok := l.reserves[key]
	if !ok {
		r = &reserve{slot: now}
		if l.reserves == nil {
			l.reserves = map[string]*reserve{}
		}
		l.reserves[key] = r
	}
	switch since := now.Sub(r.slot); {
	case since >= 2*reserveSlot:
		r.slot, r.last, r.arrivals = now, 0, 0
	case since >= reserveSlot:
		r.slot, r.last, r.arrivals = now, r.arrivals, 0
	}
	if arrival {
		r.arrivals++
	}
	if !r.until.After(now) {
		r.tokens = 0 // taken too long ago: dropped, never given
	}
	return r
}

// aheadLocked is how many tokens r's demand asks to take ahead: the
// requests of the last slot, if they were many, while Redis said at least
// a quarter of the limit was left. Nearer the limit every request asks
// Redis, so that what the headers say left, and where refusals begin, are
// as exact as without a reserve (a client pacing itself on
// X-RateLimit-Remaining sees it fall one by one), and no process holds
// tokens others may need.
func aheadLocked(r *reserve, perMinute int) int {
	if r.last < reserveMin || r.remaining < perMinute/4 {
		return 0
	}
	return min(r.last, aheadCap(perMinute))
}

// fromReserve lets a request of key through on a token taken ahead, if
// there is one (ok), and starts a refill beside when they run low. With
// none in hand but a take ahead in flight, wait is closed when it ends.
// at is the request's time on the server's clock, which its headers count
// from; arrival counts the request for the demand.
func (l *rateLimiter) fromReserve(key string, perMinute int, at time.Time, arrival bool) (out rateResult, ok bool, wait <-chan struct{}) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reserveLocked(key, perMinute, now, arrival)
	switch {
	case r == nil:
		return out, false, nil
	case r.tokens == 0:
		return out, false, r.settled
	}
	r.tokens--
	out = rateResult{allowed: true, limit: perMinute, remaining: r.remaining + r.tokens, reset: at.Add(r.reset.Sub(now))}
	if ahead := aheadLocked(r, perMinute); r.settled == nil && ahead > 0 && r.tokens <= ahead/2 {
		r.settled = make(chan struct{})
		l.refills.Go(func() { l.refill(key, perMinute, ahead) })
	}
	return out, true, nil
}

// demand is how many of key's tokens to take ahead with this request's:
// none while another take ahead of key runs, so that requests finding the
// reserve empty together take one reserve, not one each. One that returns
// more than 0 must settle.
func (l *rateLimiter) demand(key string, perMinute int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reserves[key]
	if r == nil || r.settled != nil {
		return 0
	}
	ahead := aheadLocked(r, perMinute)
	if ahead > 0 {
		r.settled = make(chan struct{})
	}
	return ahead
}

// settle records Redis's answer res to a request of key (nil: none came):
// what it had left, and, if took (a take ahead, which it ends), the tokens
// it allowed besides the request's own, which go to the reserve. It
// returns the tokens in hand, which the answer's remaining counts.
func (l *rateLimiter) settle(key string, res *redis_rate.Result, took bool) int {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reserves[key]
	if r == nil { // a small limit (a reserve with a take ahead in flight is not swept)
		return 0
	}
	if took {
		close(r.settled)
		r.settled = nil
	}
	if !r.until.After(now) {
		r.tokens = 0
	}
	if res == nil {
		return r.tokens
	}
	r.remaining, r.reset = res.Remaining, now.Add(res.ResetAfter)
	if took && res.Allowed > 0 {
		r.tokens += res.Allowed
		r.until = now.Add(reserveFor)
	}
	return r.tokens
}

// refill takes n more of key's tokens ahead.
func (l *rateLimiter) refill(key string, perMinute, n int) {
	if !l.gate.try(time.Now()) {
		l.settle(key, nil, true)
		return
	}
	res, err := l.take(context.Background(), key, perMinute, n)
	if err != nil {
		res = nil
	}
	l.settle(key, res, true)
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
