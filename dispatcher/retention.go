package dispatcher

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// Retention purges deliveries, attempts and dead letters older than Keep,
// and expired idempotency records, every Interval. One process at a time
// makes a pass (a PostgreSQL advisory lock); the others skip theirs. A pass
// deletes in statements of at most Batch rows.
type Retention struct {
	DB       *storage.DB
	Keep     time.Duration // default 336h (14 days)
	Interval time.Duration // default 1h
	Batch    int           // default storage.DefaultPurgeBatch
	Clock    webhookd.Clock
	Logger   *slog.Logger

	cancel context.CancelFunc
	loop
}

// Start runs a pass at once and then every Interval until Stop or ctx ends.
func (r *Retention) Start(ctx context.Context) {
	r.Keep = cmp.Or(r.Keep, 336*time.Hour)
	r.Interval = cmp.Or(r.Interval, time.Hour)
	ctx, r.cancel = context.WithCancel(ctx) // Stop ends a long pass between two statements
	r.start(ctx, r.Interval, func(ctx context.Context) {
		if _, p, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.Logger.Warn("retention purge failed", "err", err)
		} else if p != (storage.Purged{}) {
			r.Logger.Info("retention purge", "deliveries", p.Deliveries, "events", p.Events,
				"idempotency_records", p.IdempotencyRecords)
		}
	})
}

// Stop ends the loop, interrupting a pass between two statements.
func (r *Retention) Stop() {
	if r.cancel != nil {
		r.cancel()
	}
	r.loop.Stop()
}

// RunOnce makes one pass unless another process is making one, and tells
// whether it ran and what it removed.
func (r *Retention) RunOnce(ctx context.Context) (ran bool, p storage.Purged, err error) {
	ran, err = r.DB.AsLeader(ctx, "retention", func(ctx context.Context) error {
		now := r.Clock.Now()
		p, err = r.DB.Store().Purge(ctx, now.Add(-r.Keep), now, r.Batch)
		return err
	})
	return ran, p, err
}
