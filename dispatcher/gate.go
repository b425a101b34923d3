package dispatcher

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// gate counts the requests in flight per endpoint in this worker process
// and refuses one more past the endpoint's limit, so a slow or hanging
// endpoint holds at most its share of the worker's slots. The limit adapts
// to the endpoint (limiter): it starts at the worker's initial limit and
// moves between 1 and the endpoint's max_in_flight with what its answers
// and latency say, and how many of its deliveries the gate turned away
// lately (the backlog that lets a healthy endpoint's limit ramp).
//
// An attempt that finds its endpoint at the cap may wait for a slot only
// when a slot is sure to free soon: the endpoint answers fast enough that
// the attempts already waiting get through within wait. So a busy endpoint
// that answers in a millisecond keeps its queue moving at full speed, while
// the deliveries of a slow or hanging one are held back at once, without a
// worker slot and without database work.
type gate struct {
	mu    sync.Mutex
	def   int           // the limit an endpoint starts from
	wait  time.Duration // how long an admitted attempt waits for a slot at most
	eps   map[string]*endpointState
	freed chan string // endpoints that got a slot back, for the holder
	// idle is how long an endpoint's state is kept after its last use with
	// nothing in flight or waiting; swept is when idle ones were last
	// dropped. So the gate holds the endpoints in use lately, not every
	// endpoint ever seen.
	idle  time.Duration
	swept time.Time
	now   func() time.Time
}

// endpointState is what the gate knows of one endpoint.
type endpointState struct {
	cap      int // its max_in_flight, learnt from its claims; 0: webhookd.DefaultMaxInFlight
	lim      limiter
	rate     int // its rate_limit_per_second, learnt from its claims; 0: none
	inFlight int
	admitted int // attempts waiting for a slot
	// woken are the held deliveries the holder woke for this endpoint whose
	// attempts have not come yet (each that comes takes one off), counted
	// until wokenAt+wokenFor: the wake's way back, so a slot that frees
	// meanwhile does not wake them again.
	woken    int
	wokenAt  time.Time
	latency  time.Duration // a moving average of its request time, once one was seen
	measured bool
	lastFree time.Time     // when a slot last freed (or its first was taken)
	used     time.Time     // when an attempt last came by
	frees    chan struct{} // closed when a slot frees; nil while nobody waits
	// circuitOpen is its circuit as PostgreSQL last said it to this
	// process, at circuitSeen (markCircuit): a cache, never a count.
	circuitOpen bool
	circuitSeen time.Time

	// turned counts the attempts turned away (held back) in the round trip
	// that began at tripAt, turnedPrev those of the round trip before: how
	// many deliveries the limit did not let through lately, a rate kept per
	// round trip, not a count of the deliveries held. busy and busyPrev are
	// the most requests in flight in the same round trips.
	turned, turnedPrev int
	busy, busyPrev     int
	tripAt             time.Time
}

// gateIdle is how long the gate keeps an idle endpoint's state.
const gateIdle = 10 * time.Minute

func newGate(def int, wait time.Duration) *gate {
	return &gate{def: def, wait: wait, eps: map[string]*endpointState{}, freed: make(chan string, 1024),
		idle: gateIdle, now: time.Now}
}

// useLocked returns ep's state, made if need be and marked used at now;
// it drops the state of endpoints idle for longer than g.idle, at most
// once per g.idle.
func (g *gate) useLocked(ep string, now time.Time) *endpointState {
	if now.Sub(g.swept) >= g.idle {
		for id, s := range g.eps {
			if s.inFlight == 0 && s.admitted == 0 && s.frees == nil && now.Sub(s.used) >= g.idle {
				delete(g.eps, id)
			}
		}
		g.swept = now
	}
	s, ok := g.eps[ep]
	if !ok {
		s = &endpointState{lim: newLimiter(g.def)}
		g.eps[ep] = s
	}
	s.used = now
	return s
}

// ceilingOf is s's max_in_flight (PostgreSQL keeps one between 1 and
// 1000), or webhookd.DefaultMaxInFlight.
func ceilingOf(s *endpointState) int { return cmp.Or(s.cap, webhookd.DefaultMaxInFlight) }

// rollLocked starts a new round trip of s's counts (attempts turned away,
// most in flight) if the last one ended by now. A round trip is the
// endpoint's request time (0 until one was measured), and at least the
// gate's wait.
func (g *gate) rollLocked(s *endpointState, now time.Time) {
	rtt := max(g.wait, s.latency)
	switch since := now.Sub(s.tripAt); {
	case since >= 2*rtt:
		s.turned, s.turnedPrev, s.busy, s.busyPrev, s.tripAt = 0, 0, s.inFlight, 0, now
	case since >= rtt:
		s.turned, s.turnedPrev, s.busy, s.busyPrev, s.tripAt = 0, s.turned, s.inFlight, s.busy, now
	}
}

// capOf is s's limit now.
func (g *gate) capOf(s *endpointState) int { return s.lim.current(ceilingOf(s)) }

// admit says whether an attempt for ep may go on to wait for a slot: the
// endpoint has a free slot, or its slots turn over fast enough for one
// more waiter to get one within the gate's wait. An admitted attempt must
// call acquire next.
func (g *gate) admit(ep string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	s := g.useLocked(ep, now)
	c := g.capOf(s)
	if s.woken > 0 {
		s.woken--
	}
	if s.inFlight+s.admitted >= c {
		if s.admitted >= g.turnoverLocked(s, c, now, g.wait) {
			g.rollLocked(s, now)
			s.turned++
			return false
		}
	}
	s.admitted++
	return true
}

// turnoverLocked is how many of s's c slots free within d, as near as the
// gate can tell: at its request time each, or at the time since a slot last
// freed when that is longer (slow or hanging now); before any request was
// seen, as if one freed once per the gate's wait.
func (g *gate) turnoverLocked(s *endpointState, c int, now time.Time, d time.Duration) int {
	lat := max(s.latency, time.Millisecond)
	if !s.measured {
		lat = g.wait
	}
	if stalled := now.Sub(s.lastFree); stalled > lat {
		lat = stalled
	}
	return int(int64(c) * int64(d) / int64(lat))
}

// acquire takes a slot of ep as soon as one frees. An admitted attempt
// (admit) waits up to the gate's wait, and its admission ends either way;
// one that waits in a goroutine of its own rather than a worker slot (a
// replay job's: admitted false) waits as long as ctx allows. False: no
// slot freed in time.
func (g *gate) acquire(ctx context.Context, ep string, admitted bool) bool {
	var expired <-chan time.Time // never, unless admitted
	if admitted {
		timer := time.NewTimer(g.wait)
		defer timer.Stop()
		expired = timer.C
	}
	for {
		g.mu.Lock()
		now := g.now()
		s := g.useLocked(ep, now)
		if s.inFlight < g.capOf(s) {
			if s.inFlight == 0 {
				s.lastFree = now // a busy spell starts
			}
			s.inFlight++
			g.rollLocked(s, now)
			s.busy = max(s.busy, s.inFlight)
			if admitted {
				s.admitted--
			}
			g.mu.Unlock()
			return true
		}
		if s.frees == nil { // closed when a slot frees next
			s.frees = make(chan struct{})
		}
		ch := s.frees
		g.mu.Unlock()
		select {
		case <-ch:
			continue
		case <-expired:
		case <-ctx.Done():
		}
		if admitted {
			g.unadmit(ep)
		}
		return false
	}
}

// unadmit ends an admission that never got to acquire.
func (g *gate) unadmit(ep string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.useLocked(ep, g.now()).admitted--
}

// release gives a slot of ep back after a request that took took and
// ended as sig says (took negative: no request was made, so nothing is
// learnt of the endpoint), and tells the holder about it.
func (g *gate) release(ep string, took time.Duration, sig signal) {
	g.mu.Lock()
	now := g.now()
	s := g.useLocked(ep, now)
	if took >= 0 {
		// What the request was sent among, as near as the gate can tell
		// without following each one: the most requests in flight lately
		// (in this round trip or the last). And how many deliveries wait for
		// room: the attempts admitted to wait for a slot, and as many as were
		// turned away in a round trip lately (those held back in PostgreSQL,
		// whose count is not this process's to keep).
		g.rollLocked(s, now)
		busy := max(s.inFlight, s.busy, s.busyPrev)
		waiting := s.admitted + max(s.turned, s.turnedPrev)
		s.lim.observe(now, sig, took, busy, waiting, ceilingOf(s))
		if s.measured {
			s.latency = (7*s.latency + took) / 8
		} else {
			s.latency, s.measured = took, true
		}
	}
	s.inFlight--
	s.lastFree = now
	if s.frees != nil {
		close(s.frees)
		s.frees = nil
	}
	g.mu.Unlock()
	select {
	case g.freed <- ep:
	default: // the holder's periodic pass will see the slot
	}
}

// wakeLead is how far ahead the holder wakes held deliveries: about their
// way back (the wake's statement, their tasks' run, their claims), so that
// the slots that free meanwhile find an attempt waiting for them instead
// of standing empty. Under the gate's wait, so that those woken ahead are
// admitted to wait for their slot.
const wakeLead = 40 * time.Millisecond

// wokenFor is how long a wake's deliveries are counted as on their way
// (woken): past it, those that have not come are not coming soon.
const wokenFor = time.Second

// wakeable is how many of ep's held deliveries the holder may wake now:
// its free slots, less those woken and not come yet, and as many more as
// its slots free within wakeLead (at most its limit): those wait in
// acquire for a slot that frees while they come back. Nothing ahead
// before a request was seen, nor while the limit has not yet met the
// endpoint's capacity (limiter.settled: in slow start or its ramp, slots
// free in bursts a round trip apart, and those ahead would give up their
// wait and be held again, behind those woken after them), nor for an
// endpoint that stalls: its turnover is low. With every slot taken or
// spoken for, it tops those ahead up only once half of them have gone, so
// that a wake (a statement) brings many, not one per freed slot.
func (g *gate) wakeable(ep string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.eps[ep] // a look, not a use: the holder asks of every endpoint it holds deliveries for
	if !ok {
		return g.def
	}
	now := g.now()
	if now.Sub(s.wokenAt) > wokenFor {
		s.woken = 0
	}
	c := g.capOf(s)
	ahead := 0
	if s.measured && s.lim.settled() {
		ahead = min(g.turnoverLocked(s, c, now, wakeLead), c)
	}
	free := c - s.inFlight - s.admitted - s.woken // slots that no attempt waits or comes for
	if free < 1 && free+ahead < (ahead+1)/2 {
		return 0 // at least half of those ahead still wait or come: a wake of a few is a statement for little
	}
	return max(free+ahead, 0)
}

// woke tells the gate the holder woke n of ep's held deliveries.
func (g *gate) woke(ep string, n int) {
	if n <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	s := g.useLocked(ep, now)
	if now.Sub(s.wokenAt) > wokenFor {
		s.woken = 0
	}
	s.woken += n
	s.wokenAt = now
}

// learn records ep's own cap and rate_limit_per_second, as its claim read
// them (nil: none).
func (g *gate) learn(ep string, maxInFlight, rate *int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.useLocked(ep, g.now())
	s.cap, s.rate = deref(maxInFlight), deref(rate)
}

// rate is ep's rate_limit_per_second, if one is known; else 0.
func (g *gate) rate(ep string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.eps[ep]; ok {
		return s.rate
	}
	return 0
}

// loads reports the limit and requests in flight of the endpoints in
// flight or used in the last loadsRecent, for the heartbeat: at most
// loadsMax of them, so a heartbeat stays small however many endpoints
// the worker delivers to.
func (g *gate) loads() map[string]storage.EndpointLoad {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	out := map[string]storage.EndpointLoad{}
	for ep, s := range g.eps {
		if len(out) == loadsMax {
			break
		}
		if s.inFlight > 0 || now.Sub(s.used) < loadsRecent {
			out[ep] = storage.EndpointLoad{Limit: g.capOf(s), InFlight: s.inFlight}
		}
	}
	return out
}

const (
	loadsRecent = time.Minute
	loadsMax    = 5000
)

// markCircuit records ep's circuit as PostgreSQL said it at seen (its
// time): open or not, read by a claim or written by the breaker's count.
// A reading older than the last one kept is stale and ignored. So an
// attempt that claimed its delivery before the circuit opened can still be
// held back once it has its slot; the breaker itself is counted only in
// PostgreSQL (storage.ApplyCircuit).
func (g *gate) markCircuit(ep string, open bool, seen time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.useLocked(ep, g.now())
	if !seen.Before(s.circuitSeen) {
		s.circuitOpen, s.circuitSeen = open, seen
	}
}

// circuitOpen reports whether PostgreSQL last said ep's circuit was open.
func (g *gate) circuitOpen(ep string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.eps[ep]
	return ok && s.circuitOpen
}
