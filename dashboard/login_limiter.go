package dashboard

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// loginLimiter is a token bucket of failed logins per client IP, in this
// process: a burst of burst failures, then one more every every. A client
// whose bucket is empty is refused before its token is even compared.
type loginLimiter struct {
	burst float64
	every time.Duration

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxBuckets bounds the memory the limiter can take: past it, full buckets
// (clients who have waited long enough) are dropped.
const maxBuckets = 10000

func newLoginLimiter(burst int, every time.Duration) *loginLimiter {
	return &loginLimiter{burst: float64(burst), every: every, buckets: map[string]*bucket{}}
}

// refill brings b up to now and returns it.
func (l *loginLimiter) refill(b *bucket, now time.Time) *bucket {
	b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.every))
	b.at = now
	return b
}

// wait returns how long ip must wait before its next login may be tried; 0
// when it may try now.
func (l *loginLimiter) wait(ip string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[ip]
	if !ok {
		return 0
	}
	if l.refill(b, now).tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(l.every))
}

// failed spends one token of ip's bucket.
func (l *loginLimiter) failed(ip string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[ip]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			for k, v := range l.buckets {
				if l.refill(v, now).tokens >= l.burst {
					delete(l.buckets, k)
				}
			}
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[ip] = b
	}
	l.refill(b, now).tokens = max(0, b.tokens-1)
}

// clientIP is the address the request came from (forwarding headers are
// not trusted: anyone can send them).
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
