package dispatcher

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// bells are the asynq servers that hand a worker its tasks.
//
// One asynq server takes its tasks one at a time: a single goroutine asks
// Redis for the next task and waits for the answer before it asks again.
// So one server hands out at most one task per Redis round trip, however
// many of its slots are free, and on a loaded machine that round trip, not
// the slots nor the CPU, is what bounds a worker's deliveries per second
// (issue 38: one server delivered about 1,800/s here while its queue grew
// and a core stood partly idle; four did not let it grow).
//
// A worker therefore splits its slots between up to maxBells servers on
// the same queue. The first runs for the worker's whole life and polls at
// the worker's poll interval; the others (the extra bells) run only while
// the worker is busy: a look every bellTick that finds at least bellBusy
// tasks started since the last look, or the first server's slots three
// quarters taken, starts them all, and once neither has been true for
// bellIdle they stop. The worker counts both itself (taken, finished):
// the looks cost no Redis call, and the queue's own keys are asynq's to
// read. So at rest one server polls (an idle worker's CPU is mostly its
// polls), and under load tasks are taken as fast as their handlers free
// slots. The servers share the worker's concurrency, so their sum never
// exceeds it: the first has half, the extras the rest.
type bells struct {
	redis  redis.UniversalClient
	config func(i, n int) asynq.Config // server i of n
	n      int                         // servers at most
	// firstShare is the first server's slots (config(0, n)'s concurrency).
	firstShare int
	handler    asynq.Handler
	log        *slog.Logger
	running    func(n int) // told how many servers run, after each change

	tick, idle time.Duration

	started  atomic.Int64 // tasks started since the last look (taken)
	inFlight atomic.Int64 // tasks running now (taken, finished)

	mu       sync.Mutex
	servers  []*asynq.Server // [0] always, then the extras running
	stopping sync.WaitGroup  // extras shutting down
	stop     chan struct{}
	done     chan struct{}
}

// Tuning of the extra bells.
const (
	maxBells = 4
	bellsPer = 50 // slots per server at least: fewer servers below 2×bellsPer slots
	bellTick = 100 * time.Millisecond
	bellBusy = 100 // tasks started between two looks (1,000/s) that count as a load
	bellIdle = 2 * time.Second
)

// bellsFor is how many servers a worker of concurrency slots runs at most.
func bellsFor(concurrency int) int {
	return max(1, min(maxBells, concurrency/bellsPer))
}

// shareOf is server i's share of concurrency split between n servers:
// the first, which runs alone at rest, has half (all of it alone), and the
// others split the rest evenly.
func shareOf(concurrency, i, n int) int {
	if n == 1 {
		return concurrency
	}
	first := (concurrency + 1) / 2
	if i == 0 {
		return first
	}
	rest, extras := concurrency-first, n-1
	s := rest / extras
	if i-1 < rest%extras {
		s++
	}
	return s
}

// start starts the first server and, with more than one allowed, the loop
// that rings the extras.
func (b *bells) start(h asynq.Handler) error {
	b.handler = h
	b.firstShare = b.config(0, b.n).Concurrency
	if err := b.startOne(); err != nil {
		return err
	}
	b.stop, b.done = make(chan struct{}), make(chan struct{})
	if b.n == 1 {
		close(b.done)
		return nil
	}
	go b.loop()
	return nil
}

// startOne starts the next server.
func (b *bells) startOne() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	srv := asynq.NewServerFromRedisClient(b.redis, b.config(len(b.servers), b.n))
	if err := srv.Start(b.handler); err != nil {
		return err
	}
	b.servers = append(b.servers, srv)
	if b.running != nil {
		b.running(len(b.servers))
	}
	return nil
}

// loop looks at the tasks started and running every tick and starts or stops
// the extra bells.
func (b *bells) loop() {
	defer close(b.done)
	t := time.NewTicker(b.tick)
	defer t.Stop()
	lastBusy := time.Now()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		busy := b.started.Swap(0) >= bellBusy || 4*b.inFlight.Load() >= 3*int64(b.firstShare)
		if busy {
			lastBusy = now
		}
		b.mu.Lock()
		running := len(b.servers)
		b.mu.Unlock()
		switch {
		case busy && running < b.n:
			for range b.n - running {
				if err := b.startOne(); err != nil {
					b.log.Warn("starting another asynq server failed", "err", err)
					break
				}
			}
		case running > 1 && now.Sub(lastBusy) >= b.idle:
			b.stopExtras()
		}
	}
}

// stopExtras shuts the extra bells down in the background: each stops
// taking tasks at once and lets those it runs finish.
func (b *bells) stopExtras() {
	b.mu.Lock()
	extras := b.servers[1:]
	b.servers = b.servers[:1]
	if b.running != nil {
		b.running(1)
	}
	b.mu.Unlock()
	for _, srv := range extras {
		srv.Stop() // no new task from now on
		b.stopping.Go(srv.Shutdown)
	}
}

// shutdown stops the loop and every server, letting the tasks in flight
// finish (each server's ShutdownTimeout), the servers side by side.
func (b *bells) shutdown() {
	if b.stop == nil {
		return
	}
	close(b.stop)
	<-b.done
	b.mu.Lock()
	all := b.servers
	b.servers = nil
	b.mu.Unlock()
	for _, srv := range all {
		srv.Stop()
	}
	for _, srv := range all {
		b.stopping.Go(srv.Shutdown)
	}
	b.stopping.Wait()
}

// taken counts a task one of the servers handed the worker, finished
// its end.
func (b *bells) taken()    { b.started.Add(1); b.inFlight.Add(1) }
func (b *bells) finished() { b.inFlight.Add(-1) }
