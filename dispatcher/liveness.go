package dispatcher

import (
	"sync/atomic"
	"time"
)

// liveness is what a worker knows of its own heartbeat: when its last
// beat that landed was sent. Once storage.WorkerStale has passed since
// then, another process's reconciler may have voided the worker's leases,
// which the deliverer checks before it trusts one. Times are time.Now's,
// whose monotonic reading measures the time since a beat on this machine
// whatever the wall clock or an injected Clock does.
type liveness struct {
	start   time.Time    // a fixed point: last is measured from it
	last    atomic.Int64 // nanoseconds from start to the last beat that landed
	ever    atomic.Bool  // a beat landed
	failing atomic.Bool  // the latest beat failed
}

func newLiveness() *liveness { return &liveness{start: time.Now()} }

// landed records that a beat sent at sent landed, and tells whether beats
// were failing until now.
func (l *liveness) landed(sent time.Time) (recovered bool) {
	l.last.Store(int64(sent.Sub(l.start)))
	l.ever.Store(true)
	return l.failing.Swap(false)
}

// failed records a beat that failed, and tells whether it is the first
// since one landed: the one to log.
func (l *liveness) failed() (first bool) { return !l.failing.Swap(true) }

// since tells how long before now the last beat that landed was sent, and
// false before the first landed.
func (l *liveness) since(now time.Time) (time.Duration, bool) {
	return now.Sub(l.start.Add(time.Duration(l.last.Load()))), l.ever.Load()
}
