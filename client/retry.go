package client

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryPolicy says how a call is retried. Zero fields take the defaults
// named in their comments.
type RetryPolicy struct {
	// MaxAttempts bounds the tries of one call, the first included;
	// default 5. 1 turns retries off.
	MaxAttempts int
	// BaseDelay is the backoff before the second try; each later one
	// doubles it; default 250ms.
	BaseDelay time.Duration
	// MaxDelay caps the backoff (not Retry-After); default 30s.
	MaxDelay time.Duration
	// MaxRetryAfter is the longest Retry-After the client waits out; a
	// longer one ends the call with the response that asked for it;
	// default 2m.
	MaxRetryAfter time.Duration
	// PerTryTimeout bounds one try (the API bounds its own work at 30s);
	// a try that runs out is retried; default 40s.
	PerTryTimeout time.Duration
}

// DefaultRetryPolicy is the policy New uses.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 5, BaseDelay: 250 * time.Millisecond, MaxDelay: 30 * time.Second,
	MaxRetryAfter: 2 * time.Minute, PerTryTimeout: 40 * time.Second}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = d.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = d.MaxDelay
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = d.MaxRetryAfter
	}
	if p.PerTryTimeout <= 0 {
		p.PerTryTimeout = d.PerTryTimeout
	}
	return p
}

// backoff is the wait before try n+1 after try n failed without a
// Retry-After: full jitter, a random duration in [0, min(MaxDelay,
// BaseDelay·2^(n-1))].
func (p RetryPolicy) backoff(n int) time.Duration {
	ceiling := p.MaxDelay
	if n-1 < 30 {
		if d := p.BaseDelay << (n - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return rand.N(ceiling + 1)
}

// afterRetryAfter is the wait for a Retry-After of ra: never less than ra,
// plus up to a fifth more so that many clients told the same time do not
// all come back at once.
func afterRetryAfter(ra time.Duration) time.Duration {
	return ra + rand.N(ra/5+time.Millisecond)
}

// retryableStatus says whether an answer with this status may succeed on a
// later try.
func retryableStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// parseRetryAfter reads Retry-After as seconds or an HTTP date; ok is false
// when it is absent or unreadable.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(min(s, 1<<30)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
