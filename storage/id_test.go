package storage

import (
	"sync"
	"testing"

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
