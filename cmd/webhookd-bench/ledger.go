package main

import (
	"context"
	"slices"
	"sync"
	"time"
)

// ledger lists the events the API accepted in a scenario, when, and which
// receiver endpoints each must reach. It is what lost events and latencies
// are counted against.
type ledger struct {
	mu      sync.Mutex
	entries []ledgerEntry
	first   time.Time // when the first POST was sent
}

type ledgerEntry struct {
	eventID   string
	accepted  time.Time // when the POST's 202 arrived
	endpoints []string  // receiver endpoint names it targets
}

// Start notes the time the first POST goes out, once.
func (l *ledger) Start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first.IsZero() {
		l.first = time.Now()
	}
}

// Accept records events accepted at at, each targeting endpoints.
func (l *ledger) Accept(ids []string, at time.Time, endpoints []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		l.entries = append(l.entries, ledgerEntry{eventID: id, accepted: at, endpoints: endpoints})
	}
}

// Expected is how many (event, endpoint) receipts the accepted events need.
func (l *ledger) Expected() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.entries {
		n += len(e.endpoints)
	}
	return n
}

// deliveryStats is what the receiver saw of the ledger's events.
type deliveryStats struct {
	Expected    int
	Received    int
	Lost        int       // expected receipts that never came
	Latencies   []float64 // accepted -> first receipt, ms, sorted
	LastReceipt time.Time
	First       time.Time // first POST
	// LastAccepted is when the last 202 came: a backlog's latencies are
	// the drain's time less how long it took to post it.
	LastAccepted time.Time
}

// Stats compares the ledger with what r received.
func (l *ledger) Stats(r *receiver) deliveryStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := deliveryStats{First: l.first}
	for _, e := range l.entries {
		if e.accepted.After(s.LastAccepted) {
			s.LastAccepted = e.accepted
		}
		for _, name := range e.endpoints {
			s.Expected++
			got, ok := r.Received(name, e.eventID)
			if !ok {
				s.Lost++
				continue
			}
			s.Received++
			s.Latencies = append(s.Latencies, float64(got.Sub(e.accepted))/float64(time.Millisecond))
			if got.After(s.LastReceipt) {
				s.LastReceipt = got
			}
		}
	}
	slices.Sort(s.Latencies)
	return s
}

// Rate is receipts per second from the first POST to the last receipt.
func (s deliveryStats) Rate() float64 {
	d := s.LastReceipt.Sub(s.First)
	if s.Received == 0 || d <= 0 {
		return nan
	}
	return float64(s.Received) / d.Seconds()
}

// waitDelivered waits until the named endpoints have seen want distinct
// events, no new one has come for stall, or max has passed. It returns
// early only when ctx ends.
func waitDelivered(ctx context.Context, r *receiver, names []string, want int, stall, max time.Duration) error {
	deadline := time.Now().Add(max)
	last, lastChange := -1, time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n := r.Distinct(names)
		if n >= want {
			return nil
		}
		if n != last {
			last, lastChange = n, time.Now()
		}
		if time.Since(lastChange) > stall || time.Now().After(deadline) {
			return nil // what is missing is counted as lost
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// DueAt counts the receipts still due at t: of events accepted before
// t+slack, those r had not received by t. last is when the last of them
// that came was received (zero when none did).
func (l *ledger) DueAt(r *receiver, t time.Time, slack time.Duration) (due int, last time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if e.accepted.After(t.Add(slack)) {
			continue
		}
		for _, name := range e.endpoints {
			got, ok := r.Received(name, e.eventID)
			if ok && !got.After(t) {
				continue
			}
			due++
			if ok && got.After(last) {
				last = got
			}
		}
	}
	return due, last
}
