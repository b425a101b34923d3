package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
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
	accepted  time.Time     // when the POST's 202 arrived
	endpoints []string      // receiver endpoint names it targets
	took      time.Duration // the POST's round trip, where one POST carried it alone (0: not known)
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

// AcceptOne records one event whose POST went out at sent and was accepted
// at at, targeting endpoints.
func (l *ledger) AcceptOne(id string, sent, at time.Time, endpoints []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, ledgerEntry{eventID: id, accepted: at, endpoints: endpoints, took: at.Sub(sent)})
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

// WriteTrace writes one CSV line per receipt r has of the ledger's events:
// ms from the first POST to the event's 202, ms from it to the receipt, and
// the POST's own round trip in ms (0 where a batch carried it).
func (l *ledger) WriteTrace(r *receiver, path string) error {
	l.mu.Lock()
	var b strings.Builder
	b.WriteString("accepted_ms,latency_ms,request_ms\n")
	for _, e := range l.entries {
		for _, name := range e.endpoints {
			if got, ok := r.Received(name, e.eventID); ok {
				fmt.Fprintf(&b, "%.3f,%.3f,%.3f\n", ms(e.accepted.Sub(l.first)), ms(got.Sub(e.accepted)), ms(e.took))
			}
		}
	}
	l.mu.Unlock()
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

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
