package client

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// pacer keeps one Client under the project's rate limit. Every response's
// X-RateLimit-Limit, -Remaining and -Reset update it; before each request
// it takes one of the remaining requests. When only a few are left (5, or a
// quarter of a small limit) callers stop spending them: each waits for a
// slot, one per the time the limit takes to win back one request ((reset −
// now) / (limit − remaining)), so a long loop runs at the limit's steady
// rate with a few requests in hand, instead of running into 429 and
// bursting after it. When none are left (or a 429 said so) everyone waits
// until the reset. It is shared by every goroutine of the Client, and
// counts the requests still in flight against what the last answer said is
// left.
type pacer struct {
	mu        sync.Mutex
	now       func() time.Time
	known     bool      // an answer has told remaining and reset
	remaining int       // what is left, less the requests started since
	reset     time.Time // when the limit is whole again
	limit     int
	inFlight  int
	nextSlot  time.Time // the earliest time the next paced request may go
}

// maxPaceWait bounds one wait, whatever a header says.
const maxPaceWait = 2 * time.Minute

// low is how few remaining requests make callers pace themselves.
func (p *pacer) low() int {
	if p.limit > 0 {
		return min(5, p.limit/4)
	}
	return 5
}

// wait blocks until a request may go, or ctx ends.
func (p *pacer) wait(ctx context.Context) error {
	for {
		p.mu.Lock()
		now := p.now()
		if p.known && !now.Before(p.reset) {
			p.known = false // the limit is whole again; the next answer tells more
		}
		if !p.known || p.remaining > p.low() {
			p.take()
			return nil
		}
		if p.remaining <= 0 || p.limit <= p.remaining {
			// Nothing left: everyone waits for the reset.
			d := min(p.reset.Sub(now), maxPaceWait)
			p.mu.Unlock()
			if err := sleep(ctx, d); err != nil {
				return err
			}
			continue
		}
		interval := p.reset.Sub(now) / time.Duration(p.limit-p.remaining)
		slot := now.Add(interval)
		if p.nextSlot.After(now) {
			slot = p.nextSlot.Add(interval)
		}
		if limit := now.Add(maxPaceWait); slot.After(limit) {
			slot = limit
		}
		p.nextSlot = slot
		p.mu.Unlock()
		if err := sleep(ctx, slot.Sub(now)); err != nil {
			return err
		}
		p.mu.Lock()
		p.take()
		return nil
	}
}

// take spends one request; p.mu is held and released.
func (p *pacer) take() {
	p.remaining--
	p.inFlight++
	p.mu.Unlock()
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// done records the end of a request started after wait, and what its
// answer (nil when there was none) says about the limit.
func (p *pacer) done(resp *http.Response) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inFlight--
	if resp == nil {
		return
	}
	h := resp.Header
	remaining, err1 := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
	reset, err2 := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	if limit, err := strconv.Atoi(h.Get("X-RateLimit-Limit")); err == nil {
		p.limit = limit
	}
	p.known = true
	// Requests still in flight may not be counted in this answer yet.
	p.remaining = remaining - p.inFlight
	p.reset = time.Unix(reset, 0)
	if resp.StatusCode == http.StatusTooManyRequests {
		if ra, ok := parseRetryAfter(h.Get("Retry-After"), p.now()); ok {
			p.remaining, p.reset = 0, p.now().Add(ra)
		}
	}
}
