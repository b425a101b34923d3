package dispatcher

import (
	"container/heap"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestSignalOf(t *testing.T) {
	for _, c := range []struct {
		r    Response
		want signal
	}{
		{Response{StatusCode: 200}, signalOK},
		{Response{StatusCode: 204}, signalOK},
		{Response{StatusCode: 301}, signalNone},
		{Response{StatusCode: 400}, signalNone},
		{Response{StatusCode: 410}, signalNone},
		{Response{StatusCode: 429}, signalOverload},
		{Response{StatusCode: 500}, signalServerError},
		{Response{StatusCode: 503}, signalServerError},
		{Response{Err: errors.New("timeout")}, signalTimeout},
	} {
		if got := signalOf(c.r); got != c.want {
			t.Errorf("signalOf(%d, %v) = %d, want %d", c.r.StatusCode, c.r.Err, got, c.want)
		}
	}
}

// TestLimiterReactions: one step of each reaction, from a known state.
func TestLimiterReactions(t *testing.T) {
	const ceiling = 1000
	steady := func() limiter { // a limit of 20 in congestion avoidance, baseline 100 ms
		l := newLimiter(20)
		l.ssthresh, l.baseline, l.srtt = 20, 100*time.Millisecond, 100*time.Millisecond
		return l
	}
	for _, c := range []struct {
		name     string
		l        limiter
		now      time.Time
		sig      signal
		rtt      time.Duration
		inFlight int
		ceiling  int
		want     float64
	}{
		{"slow start: +1 per success", newLimiter(10), t0, signalOK, 200 * time.Millisecond, 10, ceiling, 11},
		{"unused limit does not grow", newLimiter(10), t0, signalOK, 200 * time.Millisecond, 4, ceiling, 10},
		{"congestion avoidance: +1/limit", steady(), t0, signalOK, 100 * time.Millisecond, 20, ceiling, 20.05},
		{"ceiling holds", newLimiter(10), t0, signalOK, time.Millisecond, 10, 10, 10},
		{"503 cuts", steady(), t0, signalOverload, 100 * time.Millisecond, 20, ceiling, 16},
		{"timeout cuts", steady(), t0, signalTimeout, 30 * time.Second, 20, ceiling, 16},
		{"4xx says nothing", steady(), t0, signalNone, 100 * time.Millisecond, 20, ceiling, 20},
		{"latency far past baseline cuts", steady(), t0, signalOK, 2 * time.Second, 20, ceiling, 18},
		{"latency within tolerance grows", steady(), t0, signalOK, 190 * time.Millisecond, 20, ceiling, 20.05},
		{"floor is 1", newLimiter(1), t0, signalTimeout, time.Second, 1, ceiling, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.l.observe(c.now, c.sig, c.rtt, c.inFlight, c.ceiling)
			if d := c.l.limit - c.want; d > 1e-9 || d < -1e-9 {
				t.Fatalf("limit %v, want %v", c.l.limit, c.want)
			}
		})
	}

	t.Run("one cut per round trip for answers, or per refusal sent since the last; every time for timeouts", func(t *testing.T) {
		l := steady()
		for range 5 {
			l.observe(t0, signalOverload, 100*time.Millisecond, 20, ceiling)
		}
		if l.limit != 16 {
			t.Fatalf("five 503s of one round trip: limit %v, want 16", l.limit)
		}
		l.observe(t0.Add(200*time.Millisecond), signalOverload, 100*time.Millisecond, 20, ceiling)
		if l.limit != 16*overloadCut {
			t.Fatalf("a 503 a round trip later: limit %v, want %v", l.limit, 16*overloadCut)
		}
		q := steady() // a receiver that refuses at once: its refusals come back within a millisecond
		q.observe(t0, signalOverload, time.Millisecond, 20, ceiling)
		q.observe(t0.Add(5*time.Millisecond), signalOverload, 10*time.Millisecond, 20, ceiling)
		if q.limit != 16 {
			t.Fatalf("a 503 to a request sent before the cut: limit %v, want 16", q.limit)
		}
		q.observe(t0.Add(5*time.Millisecond), signalOverload, time.Millisecond, 16, ceiling)
		if q.limit != 16*overloadCut {
			t.Fatalf("a 503 to a request sent after the cut: limit %v, want %v", q.limit, 16*overloadCut)
		}
		h := newLimiter(10)
		for range 10 { // a hanging receiver: every request of the window times out
			h.observe(t0, signalTimeout, 30*time.Second, 10, ceiling)
		}
		if h.current(ceiling) != 1 {
			t.Fatalf("ten timeouts: limit %v, want the floor", h.limit)
		}
	})

	t.Run("after a run of timeouts, slow start climbs back to half the limit", func(t *testing.T) {
		l := newLimiter(200)
		l.ssthresh, l.baseline, l.srtt = 200, 100*time.Millisecond, 100*time.Millisecond
		for range 30 {
			l.observe(t0, signalTimeout, time.Second, 200, ceiling)
		}
		if l.ssthresh != 100 || l.limit >= 2 {
			t.Fatalf("limit %v ssthresh %v, want floor and 100", l.limit, l.ssthresh)
		}
	})
}

// model is a receiver for the simulation: latency(n) is how long a request
// takes when n are in flight (it included), refuse(n) whether it answers
// 503 at once instead.
type model struct {
	latency func(n int) time.Duration
	refuse  func(n int) bool
	hang    bool // every request times out after latency
}

type simEvent struct {
	at  time.Time
	sig signal
	rtt time.Duration
	n   int // in flight as it was sent
}

type simQueue []simEvent

func (q simQueue) Len() int           { return len(q) }
func (q simQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q simQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)        { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simResult struct {
	done, refused int           // 2xx, 503
	limits        []int         // the limit at each second
	elapsed       time.Duration // simulated
}

// simulate runs a backlog that never ends against m for d of simulated
// time: as many requests in flight as the limit allows, as the gate keeps.
func simulate(m model, initial, ceiling int, d time.Duration, seed uint64) simResult {
	rng := rand.New(rand.NewPCG(seed, 1))
	l := newLimiter(initial)
	var (
		q        simQueue
		inFlight int
		res      simResult
		now      = t0
		second   = t0.Add(time.Second)
	)
	fill := func() {
		for inFlight < l.current(ceiling) {
			inFlight++
			e := simEvent{n: inFlight}
			if m.hang {
				e.sig, e.rtt = signalTimeout, m.latency(inFlight)
			} else if m.refuse != nil && m.refuse(inFlight) {
				e.sig, e.rtt = signalOverload, time.Millisecond
			} else {
				e.sig, e.rtt = signalOK, m.latency(inFlight)
			}
			e.rtt += time.Duration(rng.Int64N(int64(e.rtt)/10 + 1)) // a little jitter
			e.at = now.Add(e.rtt)
			heap.Push(&q, e)
		}
	}
	fill()
	for now.Before(t0.Add(d)) {
		e := heap.Pop(&q).(simEvent)
		now = e.at
		for !now.Before(second) {
			res.limits = append(res.limits, l.current(ceiling))
			second = second.Add(time.Second)
		}
		l.observe(now, e.sig, e.rtt, e.n, ceiling)
		inFlight--
		if e.sig == signalOK {
			res.done++
		} else {
			res.refused++
		}
		fill()
	}
	res.elapsed = now.Sub(t0)
	return res
}

// TestLimiterSimulation runs the limiter against model receivers, as the
// gate would with an endless backlog for one endpoint.
func TestLimiterSimulation(t *testing.T) {
	const ceiling = 1000
	fixed := func(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

	t.Run("a healthy 200 ms receiver gets hundreds in flight within seconds", func(t *testing.T) {
		r := simulate(model{latency: fixed(200 * time.Millisecond)}, 10, ceiling, 20*time.Second, 1)
		if r.limits[2] < 200 {
			t.Fatalf("limit after 3 s: %d (limits %v), want at least 200", r.limits[2], r.limits)
		}
		if rate := float64(r.done) / r.elapsed.Seconds(); rate < 1000 {
			t.Fatalf("%.0f/s, want at least 1,000/s", rate)
		}
	})

	t.Run("a receiver that serves 50 at once and refuses the rest", func(t *testing.T) {
		const capacity = 50
		lat := 100 * time.Millisecond
		r := simulate(model{latency: fixed(lat), refuse: func(n int) bool { return n > capacity }}, 10, ceiling, 120*time.Second, 2)
		best := capacity / lat.Seconds()
		rate := float64(r.done) / r.elapsed.Seconds()
		refused := float64(r.refused) / float64(r.done+r.refused)
		t.Logf("%.0f/s of %.0f/s, %.2f%% refused, limit per second %v", rate, best, 100*refused, r.limits)
		if rate < 0.8*best || refused > 0.02 {
			t.Fatalf("%.0f/s (%.0f%% of capacity), %.2f%% refused: want at least 80%% and at most 2%%",
				rate, 100*rate/best, 100*refused)
		}
	})

	t.Run("a receiver whose latency grows with load above 50", func(t *testing.T) {
		base := 100 * time.Millisecond
		grow := func(n int) time.Duration { return base * time.Duration(max(n, 50)) / 50 }
		r := simulate(model{latency: grow}, 10, ceiling, 120*time.Second, 3)
		best := 50 / base.Seconds()
		rate := float64(r.done) / r.elapsed.Seconds()
		t.Logf("%.0f/s of %.0f/s, limit per second %v", rate, best, r.limits)
		if rate < 0.8*best {
			t.Fatalf("%.0f/s, want at least 80%% of %.0f/s", rate, best)
		}
		if last := r.limits[len(r.limits)-1]; last > 250 {
			t.Fatalf("limit %d: it keeps growing while latency climbs", last)
		}
	})

	t.Run("a hanging receiver is held near the floor", func(t *testing.T) {
		r := simulate(model{latency: fixed(30 * time.Second), hang: true}, 10, ceiling, 5*time.Minute, 4)
		for i, lim := range r.limits {
			if lim > 10 {
				t.Fatalf("limit %d at %d s: more than the initial 10", lim, i+1)
			}
		}
		if last := r.limits[len(r.limits)-1]; last > 2 {
			t.Fatalf("limit %d after 5 min of timeouts (limits %v), want the floor", last, r.limits)
		}
	})

	t.Run("an endpoint's max_in_flight is the ceiling", func(t *testing.T) {
		r := simulate(model{latency: fixed(10 * time.Millisecond)}, 10, 25, 10*time.Second, 5)
		for _, lim := range r.limits {
			if lim > 25 {
				t.Fatalf("limit %d over the ceiling 25", lim)
			}
		}
	})
}
