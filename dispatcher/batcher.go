package dispatcher

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errBatcherStopped is what Do returns once the batcher has stopped.
var errBatcherStopped = errors.New("batcher stopped")

// batcher is group commit: calls of Do from many goroutines travel
// together in one call of flush (one statement and one commit), up to max
// items at a time. A flush takes what waits and what arrives within linger
// of its first item; what arrives while it runs waits for the next, one
// flush at a time. Do returns only after its item's flush has returned, so
// nothing is reported done before its commit. The flushes run on the
// batcher's own goroutine, whose stack the ones before grew.
type batcher[T, R any] struct {
	flush   func(ctx context.Context, items []T) ([]R, error)
	max     int
	timeout time.Duration // bounds one flush, whatever the callers' contexts
	linger  time.Duration // how long a flush waits for more items after the first
	in      chan batchItem[T, R]
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

type batchItem[T, R any] struct {
	v    T
	done chan batchResult[R]
}

type batchResult[R any] struct {
	r   R
	err error
}

// newBatcher starts a batcher.
func newBatcher[T, R any](max int, linger, timeout time.Duration, flush func(context.Context, []T) ([]R, error)) *batcher[T, R] {
	b := &batcher[T, R]{flush: flush, max: max, linger: linger, timeout: timeout, in: make(chan batchItem[T, R], 4*max),
		stop: make(chan struct{})}
	b.wg.Add(1)
	go b.run()
	return b
}

// Do adds v to the next flush and waits for its result. ctx bounds only
// the wait to join a flush: once v is in one, Do waits for it to end.
func (b *batcher[T, R]) Do(ctx context.Context, v T) (R, error) {
	it := batchItem[T, R]{v: v, done: make(chan batchResult[R], 1)}
	var zero R
	select {
	case b.in <- it:
	case <-b.stop:
		return zero, errBatcherStopped
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	res := <-it.done
	return res.r, res.err
}

// Stop flushes what was handed in and ends the batcher. Callers of Do must
// have returned (or stopped calling) before.
func (b *batcher[T, R]) Stop() {
	b.once.Do(func() { close(b.stop) })
	b.wg.Wait()
}

func (b *batcher[T, R]) run() {
	defer b.wg.Done()
	for {
		var items []batchItem[T, R]
		select {
		case it := <-b.in:
			items = append(items, it)
		case <-b.stop:
			b.drain()
			return
		}
		linger := time.NewTimer(b.linger)
	gather:
		for len(items) < b.max {
			select {
			case it := <-b.in:
				items = append(items, it)
			case <-linger.C:
				break gather
			}
		}
		linger.Stop()
		b.write(items) // items pile up in b.in meanwhile
	}
}

// drain flushes whatever is still in the channel after Stop.
func (b *batcher[T, R]) drain() {
	for {
		select {
		case it := <-b.in:
			b.write([]batchItem[T, R]{it})
		default:
			return
		}
	}
}

// write flushes items together; if that fails and there are several, each
// is flushed on its own, so one item that cannot be written (or a deadlock
// between two flushes) does not fail the others.
func (b *batcher[T, R]) write(items []batchItem[T, R]) {
	vs := make([]T, len(items))
	for i, it := range items {
		vs[i] = it.v
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	rs, err := b.flush(ctx, vs)
	cancel()
	if err != nil && len(items) > 1 {
		for _, it := range items {
			b.write([]batchItem[T, R]{it})
		}
		return
	}
	for i, it := range items {
		var r R
		if err == nil {
			r = rs[i]
		}
		it.done <- batchResult[R]{r: r, err: err}
	}
}
