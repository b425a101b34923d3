package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// Retention keeps the history's partitions (SPEC §4) every Interval: it
// makes the days up to Ahead from now, drops each day that ended more than
// Keep ago and holds nothing that waits (the legacy partitions of an
// upgraded installation are such a day), and purges row by row what is
// older than Keep outside every day (the default partitions: rows whose
// day was never made) and expired idempotency records. A day kept for a
// delivery that waits is kept whole. One process at a time makes a pass
// (a PostgreSQL advisory lock); the others skip theirs. A purge deletes in
// statements of at most Batch rows.
//
// With Archive, a day is written by it (archive.Archiver: written, read
// back and verified) before it is dropped, and dropped only if its
// partitions still hold the rows archived; a day whose archive fails is
// kept (the Archiver logs, counts and reports it for /readyz) and tried
// again next pass.
type Retention struct {
	DB       *storage.DB
	Keep     time.Duration // default 336h (14 days)
	Interval time.Duration // default 1h
	Ahead    time.Duration // default DefaultDaysAhead
	Batch    int           // default storage.DefaultPurgeBatch
	Clock    webhookd.Clock
	Logger   *slog.Logger
	// Archive, when set, archives a day's history before it goes
	// (archive.Archiver.Archive, with WEBHOOKD_ARCHIVE_DIR) and returns its
	// manifest's row counts; an error keeps the day.
	Archive func(ctx context.Context, from, to time.Time) (storage.DayRows, error)

	cancel context.CancelFunc
	loop
}

// Start runs a pass at once and then every Interval until Stop or ctx ends.
func (r *Retention) Start(ctx context.Context) {
	r.Keep = cmp.Or(r.Keep, 336*time.Hour)
	r.Interval = cmp.Or(r.Interval, time.Hour)
	r.Ahead = cmp.Or(r.Ahead, DefaultDaysAhead)
	ctx, r.cancel = context.WithCancel(ctx) // Stop ends a long pass between two statements
	r.start(ctx, r.Interval, func(ctx context.Context) {
		began := time.Now()
		if _, p, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.Logger.Warn("retention purge failed", "err", err)
		} else if p != (storage.Purged{}) {
			r.Logger.Info("retention purge", "days_dropped", p.Days, "deliveries", p.Deliveries, "events", p.Events,
				"idempotency_records", p.IdempotencyRecords, "took", time.Since(began).Round(time.Millisecond))
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
		if err := makeDays(ctx, store, now, r.Ahead, r.Logger); err != nil {
			return err
		}
		if p.Days, err = r.dropDays(ctx, store, now.Add(-r.Keep)); err != nil {
			return err
		}
		purged, err := store.Purge(ctx, now.Add(-r.Keep), now, r.Batch)
		purged.Days = p.Days
		p = purged
		return err
	})
	return ran, p, err
}

// DefaultDaysAhead is how far ahead of now the days are made.
const DefaultDaysAhead = 72 * time.Hour

// MakeDaysAhead makes the days up to DefaultDaysAhead from now, as a
// retention pass does first, unless a pass runs elsewhere meanwhile (then
// false: that pass makes them). `webhookd migrate` runs it, so that the
// first start of an installation does not make them while it serves:
// making a day's partitions locks the history's tables (issue 38: its
// first half second of single POSTs waited up to 0.6 s for them).
func MakeDaysAhead(ctx context.Context, db *storage.DB, now time.Time, log *slog.Logger) (bool, error) {
	return db.AsLeader(ctx, "retention", func(ctx context.Context) error {
		return makeDays(ctx, db.Store(), now, DefaultDaysAhead, log)
	})
}

// makeDays makes the days up to ahead from now, telling of each.
func makeDays(ctx context.Context, store *storage.Store, now time.Time, ahead time.Duration, log *slog.Logger) error {
	made, err := store.EnsurePartitions(ctx, now, ahead)
	for _, d := range made {
		log.Info("history partition made", "day", d.Suffix, "from", d.Lo, "to", d.Hi)
	}
	return err
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
		if r.Archive != nil {
			err = r.archiveDay(ctx, store, d)
		} else {
			err = store.DropDay(ctx, d)
		}
		var af archiveFailure
		switch {
		case errors.Is(err, storage.ErrDayWaits):
			r.Logger.Info("history partition kept: a delivery of that day still waits", "day", d.Suffix)
		case errors.Is(err, storage.ErrDayChanged):
			r.Logger.Info("history partition kept: its rows changed while it was archived; archived again next pass",
				"day", d.Suffix, "err", err)
		case errors.As(err, &af):
			// The Archiver logged and counted it; the disk that failed one
			// day would fail the next: stop here.
			r.Logger.Warn("history partition kept: archiving it failed", "day", d.Suffix)
			return dropped, nil
		case err != nil:
			return dropped, err
		default:
			dropped++
		}
	}
	return dropped, nil
}

// archiveFailure is an archive of a day that failed: the day is kept.
type archiveFailure struct{ err error }

func (f archiveFailure) Error() string { return "archive: " + f.err.Error() }
func (f archiveFailure) Unwrap() error { return f.err }

// archiveDay archives day d unless a delivery of it still waits (then it
// would be archived before it is done), then drops it if its partitions
// still hold the rows archived.
func (r *Retention) archiveDay(ctx context.Context, store *storage.Store, d storage.Day) error {
	waits, err := store.DayWaits(ctx, d)
	if err != nil {
		return err
	}
	if waits {
		return storage.ErrDayWaits
	}
	rows, err := r.Archive(ctx, d.Lo, d.Hi)
	if err != nil {
		return archiveFailure{err}
	}
	return store.DropArchivedDay(ctx, d, rows)
}
