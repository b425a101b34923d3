// Package warm runs short functions on goroutines that outlive them.
//
// A new goroutine starts with a small stack, and a deep call path (an HTTP
// round trip, a JSON decode, a database batch) grows it by copying, again
// and again, for every goroutine made per task or per request: in webhookd
// under load that copying was close to a tenth of the process's CPU. A
// goroutine of a Pool keeps its grown stack from one function to the next
// (until the garbage collector shrinks it, at most by half per cycle), so
// the growth is paid once per goroutine rather than once per call.
package warm

import (
	"sync/atomic"
	"time"
)

// Pool runs functions on goroutines that wait for the next one for up to
// an idle time before they exit. It has no size limit: a function that
// finds no goroutine waiting gets a new one, so Go never blocks, and the
// pool grows to the concurrency its callers need and shrinks when they
// need less. The zero Pool is not usable; make one with New.
type Pool struct {
	work chan func()
	idle time.Duration
	live atomic.Int64 // goroutines of the pool, busy or waiting
}

// New returns a Pool whose goroutines exit after waiting idle for a function.
func New(idle time.Duration) *Pool {
	return &Pool{work: make(chan func()), idle: idle}
}

// Go runs f on a waiting goroutine of the pool, or on a new one when none
// is waiting. A panic in f is f's to recover, as in a go statement.
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		p.live.Add(1)
		go p.serve(f)
	}
}

// Run runs f on a goroutine of the pool and returns when f does. A panic
// in f is raised again in Run's caller, so f behaves as if called in
// place (deferred recovers of the caller see it).
func (p *Pool) Run(f func()) {
	done := make(chan any, 1)
	p.Go(func() {
		// A runtime.Goexit in f also runs this, with nothing to recover:
		// the caller goes on rather than waiting for ever.
		defer func() { done <- recover() }()
		f()
	})
	if v := <-done; v != nil {
		panic(v)
	}
}

// Live is the number of goroutines the pool has now, busy or waiting.
func (p *Pool) Live() int { return int(p.live.Load()) }

func (p *Pool) serve(f func()) {
	defer p.live.Add(-1)
	f()
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		select {
		case f := <-p.work:
			f()
			t.Reset(p.idle)
		case <-t.C:
			return
		}
	}
}
