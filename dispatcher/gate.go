package dispatcher

import "sync"

// gate counts the attempts in flight per endpoint in this worker process
// and refuses one more past the endpoint's cap, so a slow or hanging
// endpoint holds at most its share of the worker's slots.
type gate struct {
	mu       sync.Mutex
	def      int            // the cap of an endpoint without its own
	caps     map[string]int // endpoints' own caps, learnt from their claims
	inFlight map[string]int
	freed    chan string // endpoints that got a slot back, for the holder
}

func newGate(def int) *gate {
	return &gate{def: def, caps: map[string]int{}, inFlight: map[string]int{}, freed: make(chan string, 1024)}
}

// acquire takes a slot of endpoint ep, or says it is at its cap.
func (g *gate) acquire(ep string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight[ep] >= g.capLocked(ep) {
		return false
	}
	g.inFlight[ep]++
	return true
}

// release gives a slot of ep back and tells the holder about it.
func (g *gate) release(ep string) {
	g.mu.Lock()
	if g.inFlight[ep]--; g.inFlight[ep] <= 0 {
		delete(g.inFlight, ep)
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
	return max(g.capLocked(ep)-g.inFlight[ep], 0)
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
