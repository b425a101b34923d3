package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// poster sends a scenario's events and writes what the API accepted into
// its ledger. Every event of one poster targets the same endpoints.
type poster struct {
	api     *apiClient
	ledger  *ledger
	make    func(i int) eventIn // the i-th event
	targets []string            // receiver endpoints each event must reach
	stop    <-chan struct{}     // Paced: once closed, no new event goes out (those under way finish)
}

// Batches posts n events in batches of size by clients concurrent
// clients, as fast as the API answers. A refused batch is counted by the
// client and skipped; any other failure ends the posting.
func (p poster) Batches(ctx context.Context, n, size, clients int) error {
	starts := make(chan int, n/size+1)
	for i := 0; i < n; i += size {
		starts <- i
	}
	close(starts)
	g, ctx := errgroup.WithContext(ctx)
	for range clients {
		g.Go(func() error {
			for start := range starts {
				if err := p.batch(ctx, start, min(start+size, n)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// batch posts events [from, to) as one batch.
func (p poster) batch(ctx context.Context, from, to int) error {
	evs := make([]eventIn, 0, to-from)
	for i := from; i < to; i++ {
		evs = append(evs, p.make(i))
	}
	p.ledger.Start()
	ids, at, err := p.api.PostBatch(ctx, evs)
	if errors.Is(err, errRefused) {
		return nil
	}
	if err != nil {
		return err
	}
	p.ledger.Accept(ids, at, p.targets)
	return nil
}

// Paced posts rate events a second, one per request, for d. A ticker sets
// the pace and a late tick catches up, so the rate holds on average; the
// requests go out from a pool of clients, so a slow answer does not hold
// back the next event. It returns the events accepted per second.
func (p poster) Paced(ctx context.Context, rate int, d time.Duration) (float64, error) {
	total := max(1, int(float64(rate)*d.Seconds()))
	due := make(chan int, total)
	var accepted atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	start := time.Now()
	g.Go(func() error { return pace(ctx, p.stop, due, rate, total) })
	for range max(8, rate/10) {
		g.Go(func() error { return p.single(ctx, due, &accepted) })
	}
	if err := g.Wait(); err != nil {
		return nan, err
	}
	return float64(accepted.Load()) / time.Since(start).Seconds(), nil
}

// pace hands out event numbers 0..total-1 on schedule: by t seconds after
// the start, rate*t of them; it stops early, without error, once stop is
// closed.
func pace(ctx context.Context, stop <-chan struct{}, due chan<- int, rate, total int) error {
	defer close(due)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	start, sent := time.Now(), 0
	for sent < total {
		for target := min(total, int(time.Since(start).Seconds()*float64(rate))+1); sent < target; sent++ {
			due <- sent
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return nil
		case <-tick.C:
		}
	}
	return nil
}

// single posts every due event alone, counting those accepted.
func (p poster) single(ctx context.Context, due <-chan int, accepted *atomic.Int64) error {
	for i := range due {
		p.ledger.Start()
		id, at, err := p.api.PostEvent(ctx, p.make(i))
		if errors.Is(err, errRefused) {
			continue
		}
		if err != nil {
			return err
		}
		p.ledger.Accept([]string{id}, at, p.targets)
		accepted.Add(1)
	}
	return nil
}
