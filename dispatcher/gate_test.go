package dispatcher

import (
	"context"
	"testing"
	"time"
)

// TestGateAdmitsWaitersByHowFastSlotsFree: at its cap, an endpoint whose
// requests take 1 ms admits many waiters; one whose slots have not freed
// for a while admits none.
func TestGateAdmitsWaitersByHowFastSlotsFree(t *testing.T) {
	ctx := context.Background()
	fill := func(g *gate, ep string) {
		for range 2 {
			if !g.admit(ep) || !g.acquire(ctx, ep) {
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

	g := newGate(2, 100*time.Millisecond)
	fill(g, "fast")
	g.release("fast", time.Millisecond)
	if !g.admit("fast") || !g.acquire(ctx, "fast") {
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
	g.latency["hung"], g.lastFree["hung"] = time.Millisecond, time.Now().Add(-time.Minute)
	g.mu.Unlock()
	if n := admitted(g, "hung"); n != 0 {
		t.Fatalf("an endpoint stalled for a minute admitted %d waiters", n)
	}
	if !g.admit("other") || !g.acquire(ctx, "other") {
		t.Fatal("another endpoint is held back too")
	}
}
