package api

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRedisGate: open while Redis answers; after a failure closed until
// probeInterval has passed, then open to exactly one caller of many at
// once; a success opens it for all; one failure a failureLogInterval is
// reported for logging.
func TestRedisGate(t *testing.T) {
	var g redisGate
	t0 := time.Unix(1_000_000, 0)
	if !g.try(t0) || !g.try(t0) || g.down() {
		t.Fatal("a new gate is closed")
	}
	if !g.failed(t0) {
		t.Fatal("the first failure is not reported for logging")
	}
	if !g.down() || g.try(t0) || g.try(t0.Add(probeInterval-time.Nanosecond)) {
		t.Fatal("the gate lets calls through before probeInterval has passed")
	}
	var (
		wg      sync.WaitGroup
		through atomic.Int32
	)
	for range 50 {
		wg.Go(func() {
			if g.try(t0.Add(probeInterval)) {
				through.Add(1)
			}
		})
	}
	wg.Wait()
	if through.Load() != 1 {
		t.Fatalf("%d concurrent calls probed Redis, want 1", through.Load())
	}
	if g.failed(t0.Add(2 * probeInterval)) {
		t.Fatal("a second failure within failureLogInterval is reported for logging")
	}
	if g.try(t0.Add(2 * probeInterval)) {
		t.Fatal("a failed probe leaves the gate open")
	}
	if !g.try(t0.Add(3 * probeInterval)) {
		t.Fatal("the next probe is refused")
	}
	g.succeeded()
	if g.down() || !g.try(t0.Add(3*probeInterval)) || !g.try(t0.Add(3*probeInterval)) {
		t.Fatal("a success leaves the gate closed")
	}
	if !g.failed(t0.Add(failureLogInterval)) {
		t.Fatal("a failure after failureLogInterval is not reported for logging")
	}
}
