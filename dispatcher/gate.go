package dispatcher

import (
	"context"
	"sync"
	"time"
)

// gate counts the requests in flight per endpoint in this worker process
// and refuses one more past the endpoint's cap, so a slow or hanging
// endpoint holds at most its share of the worker's slots.
//
// An attempt that finds its endpoint at the cap may wait for a slot only
// when a slot is sure to free soon: the endpoint answers fast enough that
// the attempts already waiting get through within wait. So a busy endpoint
// that answers in a millisecond keeps its queue moving at full speed, while
// the deliveries of a slow or hanging one are held back at once, without a
// worker slot and without database work.
type gate struct {
	mu       sync.Mutex
	def      int            // the cap of an endpoint without its own
	wait     time.Duration  // how long an admitted attempt waits for a slot at most
	caps     map[string]int // endpoints' own caps, learnt from their claims
	inFlight map[string]int
	admitted map[string]int           // attempts waiting for a slot
	latency  map[string]time.Duration // a moving average of the endpoint's request time
	lastFree map[string]time.Time     // when a slot of the endpoint last freed (or its first was taken)
	waiting  map[string]chan struct{} // closed when a slot of the endpoint frees
	freed    chan string              // endpoints that got a slot back, for the holder
}

func newGate(def int, wait time.Duration) *gate {
	return &gate{def: def, wait: wait, caps: map[string]int{}, inFlight: map[string]int{}, admitted: map[string]int{},
		latency: map[string]time.Duration{}, lastFree: map[string]time.Time{}, waiting: map[string]chan struct{}{}, freed: make(chan string, 1024)}
}

// admit says whether an attempt for ep may go on to wait for a slot: the
// endpoint has a free slot, or its slots turn over fast enough for one
// more waiter to get one within the gate's wait. An admitted attempt must
// call acquire next.
func (g *gate) admit(ep string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.capLocked(ep)
	if g.inFlight[ep]+g.admitted[ep] >= c {
		lat := max(g.latency[ep], time.Millisecond)
		if _, known := g.latency[ep]; !known {
			lat = g.wait // no request seen yet: as if a slot freed once per wait
		}
		if stalled := time.Since(g.lastFree[ep]); stalled > lat {
			lat = stalled // no slot freed for longer than it takes: slow or hanging now
		}
		if g.admitted[ep] >= int(int64(c)*int64(g.wait)/int64(lat)) {
			return false
		}
	}
	g.admitted[ep]++
	return true
}

// acquire takes a slot of ep for an admitted attempt, waiting up to the
// gate's wait; false means none freed in time.
func (g *gate) acquire(ctx context.Context, ep string) bool {
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	for {
		g.mu.Lock()
		if g.inFlight[ep] < g.capLocked(ep) {
			g.takeLocked(ep)
			g.unadmitLocked(ep)
			g.mu.Unlock()
			return true
		}
		ch := g.freesLocked(ep)
		g.mu.Unlock()
		select {
		case <-ch:
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		g.mu.Lock()
		g.unadmitLocked(ep)
		g.mu.Unlock()
		return false
	}
}

// await takes a slot of ep for an attempt that waits in a goroutine of its
// own rather than a worker slot (a replay job's): it waits as long as ctx
// allows, and takes a slot as soon as one frees. False: ctx ended first.
func (g *gate) await(ctx context.Context, ep string) bool {
	for {
		g.mu.Lock()
		if g.inFlight[ep] < g.capLocked(ep) {
			g.takeLocked(ep)
			g.mu.Unlock()
			return true
		}
		ch := g.freesLocked(ep)
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (g *gate) takeLocked(ep string) {
	if g.inFlight[ep] == 0 {
		g.lastFree[ep] = time.Now() // a busy spell starts
	}
	g.inFlight[ep]++
}

// freesLocked returns the channel closed when a slot of ep frees next.
func (g *gate) freesLocked(ep string) chan struct{} {
	ch, ok := g.waiting[ep]
	if !ok {
		ch = make(chan struct{})
		g.waiting[ep] = ch
	}
	return ch
}

// unadmit ends an admission that never got to acquire.
func (g *gate) unadmit(ep string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unadmitLocked(ep)
}

func (g *gate) unadmitLocked(ep string) {
	if g.admitted[ep]--; g.admitted[ep] <= 0 {
		delete(g.admitted, ep)
	}
}

// release gives a slot of ep back after a request that took took
// (negative: no request was made, so nothing is learnt of the endpoint's
// latency), and tells the holder about it.
func (g *gate) release(ep string, took time.Duration) {
	g.mu.Lock()
	if g.inFlight[ep]--; g.inFlight[ep] <= 0 {
		delete(g.inFlight, ep)
	}
	g.lastFree[ep] = time.Now()
	if old, ok := g.latency[ep]; ok && took >= 0 {
		g.latency[ep] = (7*old + took) / 8
	} else if took >= 0 {
		g.latency[ep] = took
	}
	if ch, ok := g.waiting[ep]; ok {
		close(ch)
		delete(g.waiting, ep)
	}
	g.mu.Unlock()
	select {
	case g.freed <- ep:
	default: // the holder's periodic pass will see the slot
	}
}

// free is how many more attempts ep may start now.
func (g *gate) free(ep string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(g.capLocked(ep)-g.inFlight[ep]-g.admitted[ep], 0)
}

// setCap records ep's own cap (nil: the default).
func (g *gate) setCap(ep string, c *int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c == nil {
		delete(g.caps, ep)
	} else {
		g.caps[ep] = *c
	}
}

func (g *gate) capLocked(ep string) int {
	if c, ok := g.caps[ep]; ok {
		return c
	}
	return g.def
}
