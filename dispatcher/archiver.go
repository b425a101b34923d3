package dispatcher

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/webhookd/webhookd/archive"
	"github.com/webhookd/webhookd/storage"
)

// archiveFailure is a day retention could not write to the archive, or
// whose files did not verify: the day is kept.
type archiveFailure struct {
	day   string
	stage string // write or verify
	err   error
}

func (e *archiveFailure) Error() string {
	return fmt.Sprintf("archive %s: %s: %v", e.day, e.stage, e.err)
}
func (e *archiveFailure) Unwrap() error { return e.err }

// archiveDay writes day d to the archive under dir, reads it back against
// its manifest, and then drops it unless its rows changed meanwhile
// (storage.ErrDayChanged) or a delivery of it waits (storage.ErrDayWaits,
// asked first, so that a day that cannot go is not written in vain).
func archiveDay(ctx context.Context, store *storage.Store, dir string, d storage.Day, now time.Time) error {
	if waits, err := store.DayWaits(ctx, d); err != nil {
		return err
	} else if waits {
		return storage.ErrDayWaits
	}
	fail := func(stage string, err error) error {
		if ctx.Err() != nil {
			return ctx.Err() // stopping, not failing
		}
		return &archiveFailure{day: d.Suffix, stage: stage, err: err}
	}
	w, err := archive.Create(dir, d.Suffix, d.Lo, d.Hi)
	if err != nil {
		return fail("write", err)
	}
	defer w.Abort()
	rows, err := store.ExportDay(ctx, d, w.Table)
	if err != nil {
		return fail("write", err)
	}
	m, err := w.Commit(now)
	if err != nil {
		return fail("write", err)
	}
	// What was read back must be what PostgreSQL sent.
	if _, err := archive.Verify(filepath.Join(dir, d.Suffix)); err != nil {
		return fail("verify", err)
	}
	if got := (storage.DayRows{Events: m.Files["events"].Rows, Deliveries: m.Files["deliveries"].Rows,
		Attempts: m.Files["attempts"].Rows, DeadLetters: m.Files["dead_letters"].Rows}); got != rows {
		return fail("verify", fmt.Errorf("the files hold %+v rows, PostgreSQL sent %+v", got, rows))
	}
	return store.DropArchivedDay(ctx, d, rows)
}

// archiveHealth is the last pass's archive failure, for /readyz: it
// clears once a pass archives every day it should.
type archiveHealth struct {
	mu      sync.Mutex
	failure *archiveFailure
	at      time.Time
}

func (h *archiveHealth) set(f *archiveFailure, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failure, h.at = f, at
}

// status is "ok", or which day is kept and since when — never why: the
// error, with its paths, is in the log.
func (h *archiveHealth) status() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failure == nil {
		return "ok"
	}
	return fmt.Sprintf("failing: day %s kept, its archive %s failed at %s (see the log)",
		h.failure.day, h.failure.stage, h.at.UTC().Format(time.RFC3339))
}
