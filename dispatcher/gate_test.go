package dispatcher

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// free is how many more attempts ep may start now: the tests' way to fill
// an endpoint's slots (the holder asks wakeable, which counts those woken
// and those ahead too).
func (g *gate) free(ep string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.eps[ep]
	if !ok {
		return g.def
	}
	return max(g.capOf(s)-s.inFlight-s.admitted, 0)
}

// TestGateAdmitsWaitersByHowFastSlotsFree: at its cap, an endpoint whose
// requests take 1 ms admits many waiters; one whose slots have not freed
// for a while admits none.
func TestGateAdmitsWaitersByHowFastSlotsFree(t *testing.T) {
	ctx := context.Background()
	fill := func(g *gate, ep string) {
		for range 2 {
			if !g.admit(ep) || !g.acquire(ctx, ep, true) {
				t.Fatal("a free slot was refused")
			}
		}
	}
	admitted := func(g *gate, ep string) int {
		n := 0
		for n < 1000 && g.admit(ep) {
			n++
		}
		return n
	}

	// The clock stands still: what counts is how fast slots freed, not how
	// long the test takes to ask.
	now := time.Now()
	newGate := func(def int, wait time.Duration) *gate {
		g := newGate(def, wait)
		g.now = func() time.Time { return now }
		return g
	}
	g := newGate(2, 100*time.Millisecond)
	fill(g, "fast")
	g.release("fast", time.Millisecond, signalNone)
	if !g.admit("fast") || !g.acquire(ctx, "fast", true) {
		t.Fatal("a freed slot was refused")
	}
	if n := admitted(g, "fast"); n != 200 { // 2 slots × 100 ms / 1 ms
		t.Fatalf("a 1 ms endpoint at its cap admitted %d waiters, want 200", n)
	}

	g = newGate(2, 100*time.Millisecond)
	fill(g, "new")
	if n := admitted(g, "new"); n != 2 { // no request seen yet: one slot's worth per wait
		t.Fatalf("an endpoint with no answer yet admitted %d waiters, want 2", n)
	}

	g = newGate(2, 100*time.Millisecond)
	fill(g, "hung")
	g.mu.Lock()
	s := g.eps["hung"]
	s.latency, s.measured, s.lastFree = time.Millisecond, true, now.Add(-time.Minute)
	g.mu.Unlock()
	if n := admitted(g, "hung"); n != 0 {
		t.Fatalf("an endpoint stalled for a minute admitted %d waiters", n)
	}
	if !g.admit("other") || !g.acquire(ctx, "other", true) {
		t.Fatal("another endpoint is held back too")
	}
}

// TestGateForgetsIdleEndpoints: the gate keeps the state of the endpoints
// in use lately, not of every endpoint it ever saw; one with a request in
// flight keeps its own, its own cap included, however long it takes.
func TestGateForgetsIdleEndpoints(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	g := newGate(2, 100*time.Millisecond)
	g.now = func() time.Time { return now }
	three, one := 3, 1
	for i := range 1000 {
		ep := fmt.Sprint("ep_", i)
		g.learn(ep, &three, &three)
		if !g.admit(ep) || !g.acquire(ctx, ep, true) {
			t.Fatal("a free slot was refused")
		}
		g.release(ep, time.Millisecond, signalOK)
	}
	g.learn("hung", &one, nil)
	if !g.admit("hung") || !g.acquire(ctx, "hung", true) {
		t.Fatal("a free slot was refused")
	}
	now = now.Add(gateIdle)
	if !g.admit("new") || !g.acquire(ctx, "new", true) {
		t.Fatal("a free slot was refused")
	}
	g.mu.Lock()
	n := len(g.eps)
	g.mu.Unlock()
	if n != 2 {
		t.Fatalf("the gate keeps %d endpoints after 1,000 went idle, want the 2 in use", n)
	}
	if f := g.free("hung"); f != 0 {
		t.Fatalf("the endpoint in flight has %d free slots, want 0 of its own cap 1", f)
	}
	if g.rate("ep_7") != 0 || g.free("ep_7") != 2 {
		t.Fatal("an idle endpoint's cap or rate is still known")
	}
}

// TestGateLimitAdaptsToTheEndpoint: slots grow while the endpoint answers
// 2xx with all of them in use, up to its max_in_flight, and shrink when it
// answers 503.
func TestGateLimitAdaptsToTheEndpoint(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	g := newGate(2, 100*time.Millisecond)
	g.now = func() time.Time { return now }
	slots := func(ep string) int { // fill every free slot
		n := 0
		for g.free(ep) > 0 {
			if !g.admit(ep) || !g.acquire(ctx, ep, true) {
				t.Fatal("a free slot was refused")
			}
			n++
		}
		return n
	}
	// A round trip with a backlog: each of the requests in flight is
	// answered, and its slot, with any the answer added, taken again at once.
	inFlight := map[string]int{}
	round := func(ep string, sig signal) int {
		now = now.Add(100 * time.Millisecond)
		for range inFlight[ep] {
			g.release(ep, 100*time.Millisecond, sig)
			inFlight[ep]--
			inFlight[ep] += slots(ep)
		}
		return inFlight[ep]
	}
	inFlight["ep"] = slots("ep")
	if n := inFlight["ep"]; n != 2 {
		t.Fatalf("%d slots at first, want the initial 2", n)
	}
	for range 5 {
		round("ep", signalOK)
	}
	if n := inFlight["ep"]; n != 64 { // slow start doubles each round trip: 2, 4, 8, 16, 32, 64
		t.Fatalf("after 5 good round trips: %d in flight, want 64", n)
	}
	if n := round("ep", signalOverload); n != 51 { // one cut in the round trip: 64 × 0.8
		t.Fatalf("after a round trip of 503s: %d in flight, want 51", n)
	}

	five := 5
	g.learn("capped", &five, nil)
	inFlight["capped"] = slots("capped")
	for range 10 {
		round("capped", signalOK)
	}
	if n := inFlight["capped"]; n != 5 {
		t.Fatalf("an endpoint with max_in_flight 5 got %d slots", n)
	}
}

// TestGateRampsOnABacklog: the attempts the gate turned away in the last
// round trip are the backlog the limiter hears of. With more turned away
// than the limit, a healthy endpoint's limit grows fourfold in a round
// trip (the ramp) instead of doubling, and stops ramping once the limit
// lets that many through.
func TestGateRampsOnABacklog(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		backlog int // attempts turned away each round trip
		want    []int
	}{
		{"no backlog: slow start doubles", 0, []int{20, 40, 80}},
		{"a backlog of 100 every round trip, every slot taken: ×4 a round trip up to the ceiling", 100, []int{40, 160, 640, 1000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Now()
			g := newGate(10, 100*time.Millisecond)
			g.now = func() time.Time { return now }
			inFlight := 0
			fill := func() {
				for g.free("ep") > 0 {
					if !g.admit("ep") || !g.acquire(ctx, "ep", true) {
						t.Fatal("a free slot was refused")
					}
					inFlight++
				}
			}
			turnAway := func(n int) { // n attempts find the endpoint at its cap
				admitted := 0
				for turned := 0; turned < n; {
					if g.admit("ep") {
						admitted++ // allowed to wait for a slot: it gives up instead
					} else {
						turned++
					}
				}
				for range admitted {
					g.unadmit("ep")
				}
			}
			fill()
			for i, want := range c.want {
				now = now.Add(100 * time.Millisecond)
				turnAway(c.backlog)
				for n := inFlight; n > 0; n-- { // the round trip's answers, each slot taken again at once
					g.release("ep", 100*time.Millisecond, signalOK)
					inFlight--
					fill()
				}
				if inFlight != want {
					t.Fatalf("round trip %d: %d in flight, want %d", i+1, inFlight, want)
				}
			}
		})
	}
}

// TestGateWakesAheadOfFreedSlots: an endpoint at its limit whose slots
// turn over every 100 ms may have as many held deliveries woken ahead as
// free within wakeLead, so that a slot that frees finds one waiting; the
// woken count as on their way until they come (each admission takes one
// off) or wokenFor passes, so a slot freed meanwhile wakes no other round
// ahead; and while every slot is taken or spoken for, those ahead are
// topped up once half of them took their slots, in one wake, not one per
// freed slot. An endpoint that stopped freeing slots, was never measured,
// or whose limit has not yet met its capacity gets nothing ahead.
func TestGateWakesAheadOfFreedSlots(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	g := newGate(50, 100*time.Millisecond)
	g.now = func() time.Time { return now }
	if n := g.wakeable("new"); n != 50 {
		t.Fatalf("an endpoint never seen: %d wakeable, want its 50 free slots", n)
	}
	for range 50 {
		if !g.admit("ep") || !g.acquire(ctx, "ep", true) {
			t.Fatal("a free slot was refused")
		}
	}
	if n := g.wakeable("ep"); n != 0 {
		t.Fatalf("no request answered yet, every slot taken: %d wakeable, want 0", n)
	}
	// Every slot turns over once in 100 ms; the limit stays at 50 (its
	// max_in_flight).
	fifty := 50
	g.learn("ep", &fifty, nil)
	now = now.Add(100 * time.Millisecond)
	g.release("ep", 100*time.Millisecond, signalOK)
	if !g.admit("ep") || !g.acquire(ctx, "ep", true) {
		t.Fatal("a freed slot was refused")
	}
	if n := g.wakeable("ep"); n != 0 {
		t.Fatalf("an endpoint whose limit has not met its capacity: %d wakeable, want 0 (slots free in bursts)", n)
	}
	g.mu.Lock()
	g.eps["ep"].lim.ssthresh = 50 // as a 503 past its capacity leaves it
	g.mu.Unlock()
	ahead := 50 * int(wakeLead/time.Millisecond) / 100
	if n := g.wakeable("ep"); n != ahead {
		t.Fatalf("at the limit, slots turning over in 100 ms: %d wakeable, want the %d that free within %v", n, ahead, wakeLead)
	}
	g.woke("ep", ahead)
	if n := g.wakeable("ep"); n != 0 {
		t.Fatalf("after waking them: %d wakeable, want 0 while they are on their way", n)
	}
	g.release("ep", 100*time.Millisecond, signalOK)
	if n := g.wakeable("ep"); n != 0 {
		t.Fatalf("a slot freed while the %d woken are on their way: %d wakeable, want 0 (they cover it)", ahead, n)
	}
	for range ahead { // they come, and wait for their slots
		if !g.admit("ep") {
			t.Fatal("a woken delivery was not admitted to wait for its slot")
		}
	}
	if !g.acquire(ctx, "ep", true) { // the first takes the freed slot
		t.Fatal("a woken delivery waiting did not get the freed slot")
	}
	// Slots free and the waiting take them: a wake tops those ahead up
	// once half of them have gone, not one by one.
	for k := 2; k <= ahead/2; k++ {
		g.release("ep", 100*time.Millisecond, signalOK)
		if !g.acquire(ctx, "ep", true) {
			t.Fatal("a woken delivery waiting did not get the freed slot")
		}
		want := 0
		if k == ahead/2 {
			want = ahead / 2
		}
		if n := g.wakeable("ep"); n != want {
			t.Fatalf("%d of the %d ahead took their slots: %d wakeable, want %d", k, ahead, n, want)
		}
	}
	g.woke("ep", 1)
	now = now.Add(wokenFor + time.Millisecond)
	if n := g.wakeable("ep"); n != 0 {
		t.Fatalf("no slot freed for over a second: %d wakeable, want 0 (the %d waiting cover the free one, and the stalled endpoint gets almost nothing ahead)", n, ahead)
	}
}
