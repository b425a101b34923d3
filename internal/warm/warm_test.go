package warm

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRunReturnsAfterTheFunctionAndReusesItsGoroutine(t *testing.T) {
	p := New(time.Minute)
	ran := 0
	for range 100 {
		p.Run(func() { ran++ })
	}
	if ran != 100 {
		t.Fatalf("ran %d functions, want 100", ran)
	}
	if got := p.Live(); got != 1 {
		t.Fatalf("one caller at a time made %d goroutines, want 1", got)
	}
}

func TestGoNeverWaitsForABusyGoroutine(t *testing.T) {
	p := New(time.Minute)
	release := make(chan struct{})
	var started sync.WaitGroup
	const n = 50
	started.Add(n)
	for range n {
		p.Go(func() { started.Done(); <-release })
	}
	started.Wait() // each blocked function has a goroutine of its own
	if got := p.Live(); got != n {
		t.Fatalf("%d blocked functions on %d goroutines", n, got)
	}
	close(release)
}

func TestWorkGoesToTheGoroutineThatFinishedLast(t *testing.T) {
	p := New(time.Minute)
	release := make(chan struct{})
	var started, finished sync.WaitGroup
	started.Add(3)
	finished.Add(3)
	for range 3 { // three goroutines, busy at once
		p.Go(func() { defer finished.Done(); started.Done(); <-release })
	}
	started.Wait()
	close(release)
	finished.Wait()
	waitFor(t, "the three to wait", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.idle) == 3
	})
	p.mu.Lock()
	last := p.idle[2]
	p.mu.Unlock()
	for range 10 { // one caller at a time: always the same goroutine
		p.Run(func() {})
		p.mu.Lock()
		top := p.idle[len(p.idle)-1]
		p.mu.Unlock()
		if top != last {
			t.Fatal("a call went to a goroutine other than the one that finished last")
		}
	}
	if got := p.Live(); got != 3 {
		t.Fatalf("%d goroutines, want 3", got)
	}
}

func TestIdleGoroutinesExit(t *testing.T) {
	p := New(10 * time.Millisecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		p.Go(func() { defer wg.Done(); time.Sleep(5 * time.Millisecond) })
	}
	wg.Wait()
	waitFor(t, "idle goroutines to exit", func() bool { return p.Live() == 0 })
	p.Run(func() {}) // the pool still works once empty
}

func TestRunRaisesThePanicInTheCaller(t *testing.T) {
	p := New(time.Minute)
	boom := errors.New("boom")
	defer func() {
		if r := recover(); r != boom {
			t.Fatalf("recovered %v, want the function's panic", r)
		}
	}()
	p.Run(func() { panic(boom) })
	t.Fatal("Run returned after its function panicked")
}

func TestRunReturnsWhenTheFunctionCallsGoexit(t *testing.T) {
	p := New(time.Minute)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(func() { runtime.Goexit() })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run waits for ever after its function called runtime.Goexit")
	}
	waitFor(t, "the exited goroutine to leave the pool", func() bool { return p.Live() == 0 })
}

// BenchmarkDeepCall shows what the pool saves: each call grows a stack to
// about 64 KiB, on a new goroutine each time or on the pool's.
func BenchmarkDeepCall(b *testing.B) {
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			done := make(chan struct{})
			go func() { deep(64); close(done) }()
			<-done
		}
	})
	b.Run("pool", func(b *testing.B) {
		p := New(time.Minute)
		for b.Loop() {
			p.Run(func() { deep(64) })
		}
	})
}

//go:noinline
func deep(n int) byte {
	var buf [1000]byte
	if n == 0 {
		return buf[0]
	}
	buf[n] = byte(n)
	return deep(n-1) + buf[n]
}
