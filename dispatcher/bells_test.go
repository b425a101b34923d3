package dispatcher

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/webhookd/webhookd/internal/testenv"
)

func TestBellsShares(t *testing.T) {
	for _, c := range []struct {
		concurrency, servers int
		shares               []int
	}{
		{1, 1, []int{1}},
		{10, 1, []int{10}},
		{99, 1, []int{99}},
		{100, 2, []int{50, 50}},
		{150, 3, []int{75, 38, 37}},
		{500, 4, []int{250, 84, 83, 83}},
		{5000, 4, []int{2500, 834, 833, 833}},
	} {
		if n := bellsFor(c.concurrency); n != c.servers {
			t.Errorf("concurrency %d: %d servers, want %d", c.concurrency, n, c.servers)
			continue
		}
		sum := 0
		for i, want := range c.shares {
			got := shareOf(c.concurrency, i, c.servers)
			sum += got
			if got != want {
				t.Errorf("concurrency %d, server %d of %d: %d slots, want %d", c.concurrency, i, c.servers, got, want)
			}
		}
		if sum != c.concurrency {
			t.Errorf("concurrency %d: the shares add up to %d", c.concurrency, sum)
		}
	}
}

// TestBellsRingWhileTasksWait: with the first server's slots taken and
// tasks waiting in the queue, the extra servers start, every task runs once, no more run at once than the
// worker's concurrency, and once the tasks are done and the idle time
// has passed only the first server is left.
func TestBellsRingWhileTasksWait(t *testing.T) {
	rdb, _ := testenv.Redis(t)
	const (
		queue       = "bells"
		concurrency = 6
		tasks       = 120
	)
	var (
		mu      sync.Mutex
		running []int // what b.running was told, in order
	)
	runningNow := func() []int { mu.Lock(); defer mu.Unlock(); return append([]int(nil), running...) }
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := &bells{redis: rdb, n: 3, log: quiet, tick: 10 * time.Millisecond,
		idle:    300 * time.Millisecond,
		running: func(n int) { mu.Lock(); running = append(running, n); mu.Unlock() },
		config: func(i, n int) asynq.Config {
			return asynq.Config{Concurrency: shareOf(concurrency, i, n), Queues: map[string]int{queue: 1},
				TaskCheckInterval: 10 * time.Millisecond, Logger: asynqLogger{quiet}, LogLevel: asynq.WarnLevel}
		}}

	// Every task waits until the test lets them go, so the first server's
	// share fills and the rest wait in the queue.
	let := make(chan struct{})
	var inFlight, most atomic.Int64
	seen := sync.Map{}
	var twice atomic.Int64
	handler := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		b.taken() // as Worker.handleDelivery does
		defer b.finished()
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if _, dup := seen.LoadOrStore(string(task.Payload()), true); dup {
			twice.Add(1)
		}
		select {
		case <-let:
		case <-ctx.Done():
		}
		return nil
	})

	client := asynq.NewClientFromRedisClient(rdb)
	for i := range tasks {
		if _, err := client.Enqueue(asynq.NewTask("t", []byte(strconv.Itoa(i))), asynq.Queue(queue)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.start(handler); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.shutdown)
	testenv.WaitFor(t, 5*time.Second, "three servers", func() bool { r := runningNow(); return len(r) > 0 && r[len(r)-1] == 3 })
	testenv.WaitFor(t, 5*time.Second, "every slot taken", func() bool { return inFlight.Load() == concurrency })
	close(let)
	testenv.WaitFor(t, 10*time.Second, "every task handled", func() bool {
		n := 0
		seen.Range(func(any, any) bool { n++; return true })
		return n == tasks && inFlight.Load() == 0
	})
	testenv.WaitFor(t, 5*time.Second, "the extras stopped", func() bool { r := runningNow(); return r[len(r)-1] == 1 })
	if m := most.Load(); m > concurrency {
		t.Fatalf("%d tasks ran at once, more than the concurrency %d", m, concurrency)
	}
	if n := twice.Load(); n > 0 {
		t.Fatalf("%d tasks ran twice", n)
	}
	if r := runningNow(); r[0] != 1 {
		t.Fatalf("servers running %v: the first ran alone first", r)
	}
}
