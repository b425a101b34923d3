package api

import (
	"sync/atomic"
	"time"
)

// redisGate keeps the API's calls to Redis that it can do without — the
// rate limiter fails open, new deliveries wait in PostgreSQL for the
// reconciler (SPEC §2) — from each waiting on a Redis that does not
// answer. After a failure the calls skip Redis; once probeInterval has
// passed, one call tries it again while the others go on skipping, and a
// success lets them all through again. Without it, while Redis is down,
// every accepted event request would dial it again and again for its
// deliveries (go-redis retries with backoff) and every request would wait
// for the limiter's timeout.
type redisGate struct {
	// probeAt is when (Unix ns) the next call may try Redis; 0 while Redis
	// answers.
	probeAt atomic.Int64
	lastLog atomic.Int64 // Unix seconds of the last failure reported for logging
}

// probeInterval is how often a closed gate lets one call try Redis.
const probeInterval = time.Second

// failureLogInterval is how often a closed gate reports a failure for
// logging: one line per interval, not one per request.
const failureLogInterval = 10 * time.Second

// try reports whether a call at now may use Redis: always while it
// answers; while it does not, one call per probeInterval.
func (g *redisGate) try(now time.Time) bool {
	p := g.probeAt.Load()
	return p == 0 || now.UnixNano() >= p && g.probeAt.CompareAndSwap(p, now.Add(probeInterval).UnixNano())
}

// failed records that a call failed at now, and reports whether the
// failure is the one to log for this failureLogInterval.
func (g *redisGate) failed(now time.Time) (log bool) {
	g.probeAt.Store(now.Add(probeInterval).UnixNano())
	last := g.lastLog.Load()
	return now.Unix()-last >= int64(failureLogInterval/time.Second) && g.lastLog.CompareAndSwap(last, now.Unix())
}

// succeeded records that a call reached Redis: the gate opens.
func (g *redisGate) succeeded() {
	if g.probeAt.Load() != 0 {
		g.probeAt.Store(0)
	}
}

// down reports whether the last call that tried Redis failed.
func (g *redisGate) down() bool { return g.probeAt.Load() != 0 }
