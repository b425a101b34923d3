package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// Retention keeps the history's partitions (SPEC §4) every Interval: it
// makes the days up to Ahead from now, drops each day that ended more than
// Keep ago and holds nothing that waits, and purges row by row what is
// older than Keep outside such days (the legacy and default partitions, a
// day kept for a delivery that waits) and expired idempotency records. One
// process at a time makes a pass (a PostgreSQL advisory lock); the others
// skip theirs. A purge deletes in statements of at most Batch rows.
//
// With ArchiveDir, a day is written there (package archive) and read back
// before it is dropped; a day that fails either is kept, logged, counted
// (ArchiveFailed) and named by ArchiveStatus, and tried again next pass.
// The purge then leaves the days' rows alone (storage.PurgeOutsideDays):
// they go only with their day, archived.
type Retention struct {
	DB       *storage.DB
	Keep     time.Duration // default 336h (14 days)
	Interval time.Duration // default 1h
	Ahead    time.Duration // default 72h
	Batch    int           // default storage.DefaultPurgeBatch
	Clock    webhookd.Clock
	Logger   *slog.Logger
	// ArchiveDir, when set, is where days are archived before they go.
	ArchiveDir string
	// Archived and ArchiveFailed, when set, count the days archived and
	// the failures by stage (write, verify): the metrics.
	Archived      func()
	ArchiveFailed func(stage string)

	archive archiveHealth
	cancel  context.CancelFunc
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
	if r.Ahead == 0 {
		r.Ahead = 72 * time.Hour
	}
	ctx, r.cancel = context.WithCancel(ctx) // Stop ends a long pass between two statements
	r.start(ctx, r.Interval, func(ctx context.Context) {
		if _, p, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.Logger.Warn("retention purge failed", "err", err)
		} else if p != (storage.Purged{}) {
			r.Logger.Info("retention purge", "days_dropped", p.Days, "deliveries", p.Deliveries, "events", p.Events,
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
		store := r.DB.Store()
		made, err := store.EnsurePartitions(ctx, now, r.Ahead)
		for _, d := range made {
			r.Logger.Info("history partition made", "day", d.Suffix, "from", d.Lo, "to", d.Hi)
		}
		if err != nil {
			return err
		}
		if p.Days, err = r.dropDays(ctx, store, now.Add(-r.Keep)); err != nil {
			return err
		}
		purge := store.Purge
		if r.ArchiveDir != "" {
			purge = store.PurgeOutsideDays
		}
		purged, err := purge(ctx, now.Add(-r.Keep), now, r.Batch)
		purged.Days = p.Days
		p = purged
		return err
	})
	return ran, p, err
}

// dropDays drops the days that ended before cutoff and hold nothing that
// waits — archived first with ArchiveDir — and returns how many it
// dropped.
func (r *Retention) dropDays(ctx context.Context, store *storage.Store, cutoff time.Time) (int64, error) {
	days, err := store.Days(ctx)
	if err != nil {
		return 0, err
	}
	var dropped int64
	for _, d := range days {
		if d.Hi.After(cutoff) {
			break // days are oldest first
		}
		if r.ArchiveDir != "" {
			err = archiveDay(ctx, store, r.ArchiveDir, d, r.Clock.Now())
		} else {
			err = store.DropDay(ctx, d)
		}
		var af *archiveFailure
		switch {
		case errors.Is(err, storage.ErrDayWaits):
			r.Logger.Info("history partition kept: a delivery of that day still waits", "day", d.Suffix)
		case errors.Is(err, storage.ErrDayChanged):
			r.Logger.Info("history partition kept: its rows changed while it was archived; archived again next pass",
				"day", d.Suffix, "err", err)
		case errors.As(err, &af):
			// The disk that failed one day would fail the next: stop here.
			r.Logger.Warn("history partition kept: writing it to the archive failed", "day", d.Suffix,
				"stage", af.stage, "archive_dir", r.ArchiveDir, "err", af.err)
			if r.ArchiveFailed != nil {
				r.ArchiveFailed(af.stage)
			}
			r.archive.set(af, r.Clock.Now())
			return dropped, nil
		case err != nil:
			return dropped, err
		default:
			dropped++
			if r.ArchiveDir != "" {
				r.Logger.Info("history partition archived and dropped", "day", d.Suffix, "archive_dir", r.ArchiveDir)
				if r.Archived != nil {
					r.Archived()
				}
			}
		}
	}
	r.archive.set(nil, time.Time{}) // every day due went, or waits for a reason of its own
	return dropped, nil
}

// ArchiveStatus says "ok" while the archive works (or is off), else which
// day the last pass kept for a failed archive, and since when.
func (r *Retention) ArchiveStatus() string { return r.archive.status() }
