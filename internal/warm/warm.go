// Package warm runs short functions on goroutines that outlive them.
//
// A new goroutine starts with a small stack, and a deep call path (an HTTP
// round trip, a JSON decode, a database batch) grows it by copying, again
// and again, for every goroutine made per task or per request: in webhookd
// under load that copying is a large share of the process's work. A
// goroutine of a Pool keeps its grown stack from one function to the next,
// so the growth is paid once per goroutine rather than once per call.
//
// The garbage collector halves the stack of a goroutine that uses little
// of it when a cycle finds it waiting, so the pool hands work to the
// goroutine that finished last (LIFO): the few it needs at a time stay
// busy and keep their stacks, and the rest wait, shrink and exit, where a
// channel shared by all (FIFO) would spread the work over every goroutine
// and have each regrow its stack after every cycle.
//
// It is hand-written where plain goroutines would do, so it stays only
// while webhookd with it beats webhookd with go statements by at least 5%
// of a make bench figure, measured in alternating runs of one session; the
// commit that last measured it gives the figures.
package warm

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs functions on goroutines that wait for the next one for up to
// an idle time before they exit. It has no size limit: a function that
// finds no goroutine waiting gets a new one, so Go never blocks, and the
// pool grows to the concurrency its callers need and shrinks when they
// need less. The zero Pool is not usable; make one with New.
type Pool struct {
	idleFor time.Duration
	live    atomic.Int64 // goroutines of the pool, busy or waiting

	mu   sync.Mutex
	idle []*worker // waiting, the one that finished last on top
}

// worker is one goroutine of a Pool; whoever takes it off the idle stack
// sends it one job.
type worker struct{ work chan job }

// job is a function to run; done, when set, takes f's panic (or nil) once
// the worker is back on the idle stack, so that a caller that goes on to
// its next Run finds it there.
type job struct {
	f    func()
	done chan any
}

// New returns a Pool whose goroutines exit after waiting idle for a function.
func New(idle time.Duration) *Pool {
	return &Pool{idleFor: idle}
}

// Go runs f on the goroutine of the pool that finished last, or on a new
// one when none is waiting. A panic in f is f's to recover, as in a go
// statement.
func (p *Pool) Go(f func()) { p.start(job{f: f}) }

// Run runs f on a goroutine of the pool and returns when f does. A panic
// in f is raised again in Run's caller, so f behaves as if called in
// place (deferred recovers of the caller see it).
func (p *Pool) Run(f func()) {
	done := make(chan any, 1)
	p.start(job{f: f, done: done})
	if v := <-done; v != nil {
		panic(v)
	}
}

// Live is the number of goroutines the pool has now, busy or waiting.
func (p *Pool) Live() int { return int(p.live.Load()) }

func (p *Pool) start(j job) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.work <- j // buffered: never waits
		return
	}
	p.mu.Unlock()
	p.live.Add(1)
	go p.serve(&worker{work: make(chan job, 1)}, j)
}

func (p *Pool) serve(w *worker, j job) {
	defer p.live.Add(-1)
	t := time.NewTimer(p.idleFor)
	defer t.Stop()
	for {
		v := j.run()
		p.mu.Lock()
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		if j.done != nil {
			j.done <- v
		}
		t.Reset(p.idleFor)
		select {
		case j = <-w.work:
			continue
		case <-t.C:
		}
		p.mu.Lock()
		for i, x := range p.idle {
			if x == w { // still waiting: leave
				p.idle = append(p.idle[:i], p.idle[i+1:]...)
				p.mu.Unlock()
				return
			}
		}
		p.mu.Unlock()
		j = <-w.work // taken just as its time ran out: its job is on the way
	}
}

// run calls j.f. For a Run it returns f's panic, recovered; should f call
// runtime.Goexit, this goroutine ends, and the caller is told so (nil)
// rather than left waiting.
func (j job) run() (panicked any) {
	if j.done == nil {
		j.f()
		return nil
	}
	returned := false
	defer func() {
		if !returned {
			if panicked = recover(); panicked == nil { // Goexit
				j.done <- nil
			}
		}
	}()
	j.f()
	returned = true
	return nil
}
