package dispatcher

import (
	"context"
	"sync"
	"time"
)

// loop runs a background pass at once and then on a ticker until Stop or
// its context ends: the shape of the reconciler and the retention purge.
type loop struct {
	stop chan struct{}
	done sync.WaitGroup
}

func (l *loop) start(ctx context.Context, interval time.Duration, pass func(context.Context)) {
	l.stop = make(chan struct{})
	l.done.Go(func() {
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			pass(ctx)
			select {
			case <-ctx.Done():
				return
			case <-l.stop:
				return
			case <-ticker.C:
			}
		}
	})
}

// Stop ends the loop and waits for its pass to finish.
func (l *loop) Stop() {
	if l.stop != nil {
		close(l.stop)
		l.done.Wait()
		l.stop = nil
	}
}
