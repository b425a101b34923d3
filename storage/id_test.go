package storage

import (
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// TestIDsIncreaseWhileOthersAreMade: the ids one goroutine makes sort in
// the order it made them, while other goroutines make ids too (ours and
// the ulid package's own): a bulk job's events are listed in line order.
// ulid.Make reads the millisecond before it takes its lock: one that waited
// for it behind a later millisecond resets the shared entropy to random.
func TestIDsIncreaseWhileOthersAreMade(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					_, _ = newID("x_"), ulid.Make()
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	prev := newID(prefixEvent)
	for i := range 200000 {
		id := newID(prefixEvent)
		if id <= prev {
			t.Fatalf("id %d, %s, sorts before the one made just before it, %s", i, id, prev)
		}
		prev = id
	}
}

// TestIDsOfOneMillisecondIncreaseWhateverIsMadeBetween: events made one
// after another with the same created_at (a test clock, or one instant
// given to a whole call) get ids in that order, and so do the deliveries
// that take their event's time, although ids of other milliseconds are
// made between them — more of them than mint remembers.
func TestIDsOfOneMillisecondIncreaseWhateverIsMadeBetween(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var prevEvent, prevDelivery string
	for i := range 1000 {
		ev := newIDsTime(prefixEvent, at, 1)[0]
		dlv := newIDAt(prefixDelivery, ev)
		_ = newID(prefixRequest)
		for j := range 10 { // other milliseconds: 10,000 in all
			_ = newIDsTime(prefixEvent, at.Add(time.Duration(i*10+j+1)*time.Millisecond), 1)
		}
		if ev <= prevEvent || dlv <= prevDelivery {
			t.Fatalf("step %d: event %s after %s, delivery %s after %s: not increasing", i, ev, prevEvent, dlv, prevDelivery)
		}
		if ev[len(prefixEvent):len(prefixEvent)+10] != dlv[len(prefixDelivery):len(prefixDelivery)+10] {
			t.Fatalf("delivery %s does not carry its event's time (%s)", dlv, ev)
		}
		prevEvent, prevDelivery = ev, dlv
	}
}
