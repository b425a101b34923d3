package dispatcher

import (
	"sync"
	"time"
)

// liveness is what a worker knows of its own heartbeat: when its last
// beat landed. Once storage.WorkerStale has passed since then, another
// process's reconciler may have voided the worker's leases, which the
// deliverer can check before it trusts one. Times are time.Now's, whose
// monotonic reading measures the time since a beat on this machine
// whatever the wall clock or an injected Clock does.
type liveness struct {
	mu      sync.Mutex
	last    time.Time // when the last beat that landed was sent; zero before the first
	failing bool      // the latest beat failed
}

// landed records that a beat sent at sent landed (PostgreSQL's beat_at is
// no earlier), and tells whether beats were failing until now.
func (l *liveness) landed(sent time.Time) (recovered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recovered, l.failing, l.last = l.failing, false, sent
	return recovered
}

// failed records a beat that failed, and tells whether it is the first
// since one landed: the one to log.
func (l *liveness) failed() (first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first, l.failing = !l.failing, true
	return first
}

// since tells how long before now the last beat that landed was sent, and
// false before the first landed.
func (l *liveness) since(now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Sub(l.last), !l.last.IsZero()
}
