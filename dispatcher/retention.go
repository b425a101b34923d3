package dispatcher

import (
	"context"
	"log/slog"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// Retention purges deliveries, attempts and dead letters older than Keep,
// and expired idempotency records, every Interval.
type Retention struct {
	DB       *storage.DB
	Keep     time.Duration // default 336h (14 days)
	Interval time.Duration // default 1h
	Clock    webhookd.Clock
	Logger   *slog.Logger

	loop
}

// Start runs a pass at once and then every Interval until Stop or ctx ends.
func (r *Retention) Start(ctx context.Context) {
	if r.Keep == 0 {
		r.Keep = 336 * time.Hour
	}
	if r.Interval == 0 {
		r.Interval = time.Hour
	}
	r.start(ctx, r.Interval, func(ctx context.Context) {
		now := r.Clock.Now()
		if p, err := r.DB.Store().Purge(ctx, now.Add(-r.Keep), now); err != nil {
			r.Logger.Warn("retention purge failed", "err", err)
		} else if p != (storage.Purged{}) {
			r.Logger.Info("retention purge", "deliveries", p.Deliveries, "events", p.Events,
				"idempotency_records", p.IdempotencyRecords)
		}
	})
}
