package wire

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfter caps how far a receiver's Retry-After can push the next
// attempt (SPEC §3).
const maxRetryAfter = 24 * time.Hour

// ParseRetryAfter reads a Retry-After header value, either non-negative
// integer seconds or an HTTP date, and returns how long to wait from now.
// The wait is rounded up to whole seconds, so an attempt never comes early;
// a date in the past gives 0; anything beyond 24 h is capped at 24 h. It
// returns false when v is neither form.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true // only overflow fails here: a huge number
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := at.Sub(now)
	switch {
	case d <= 0:
		return 0, true
	case d >= maxRetryAfter:
		return maxRetryAfter, true
	}
	return (d + time.Second - 1) / time.Second * time.Second, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
