package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// TestArchivedDayThatChangedIsKept: a day whose rows changed between its
// export and its drop (a delivery made and finished since) is not dropped,
// and goes once exported again.
func TestArchivedDayThatChangedIsKept(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	ctx := context.Background()
	f.finish(f.mk(f.now), webhookd.DeliverySucceeded, "")
	days, err := f.s.Days(ctx)
	if err != nil || days[0].Suffix != "legacy" {
		t.Fatalf("days %+v, %v", days, err)
	}
	export := func() (storage.DayRows, map[string]*bytes.Buffer) {
		t.Helper()
		out := map[string]*bytes.Buffer{}
		rows, err := f.s.ExportDay(ctx, days[0], func(table string) (io.Writer, error) {
			out[table] = &bytes.Buffer{}
			return out[table], nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return rows, out
	}
	rows, out := export()
	if rows != (storage.DayRows{Events: 1, Deliveries: 1, Attempts: 1}) || bytes.Count(out["attempts"].Bytes(), []byte("\n")) != 1 {
		t.Fatalf("exported %+v: %v", rows, out)
	}

	f.finish(f.mk(f.now), webhookd.DeliveryDeadLetter, webhookd.ReasonExhausted)
	if err := f.s.DropArchivedDay(ctx, days[0], rows); !errors.Is(err, storage.ErrDayChanged) {
		t.Fatalf("drop of a changed day: %v, want ErrDayChanged", err)
	}
	if left, _ := f.s.Days(ctx); len(left) == 0 || left[0].Suffix != "legacy" {
		t.Fatalf("the changed day went: %+v", left)
	}

	rows, _ = export()
	// (A dead letter may make an operational event of its own.)
	if rows.Events < 2 || rows.Deliveries != 2 || rows.Attempts != 2 || rows.DeadLetters != 1 {
		t.Fatalf("exported again %+v", rows)
	}
	if err := f.s.DropArchivedDay(ctx, days[0], rows); err != nil {
		t.Fatal(err)
	}
	if left, _ := f.s.Days(ctx); len(left) != 0 {
		t.Fatalf("days left %+v", left)
	}
}

// TestExportDayBlocksNoWriter: while a day's export is under way (paused
// in the middle of its deliveries), a delivery of that day is updated
// through a generic plan on the parent — which locks every partition —
// and a new event is written, neither waiting for the export.
func TestExportDayBlocksNoWriter(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	ctx := context.Background()
	id := f.mk(f.now)
	days, err := f.s.Days(ctx)
	if err != nil {
		t.Fatal(err)
	}
	paused, resume := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := f.s.ExportDay(ctx, days[0], func(table string) (io.Writer, error) {
			if table != "deliveries" {
				return io.Discard, nil
			}
			return writerFunc(func(p []byte) (int, error) {
				select {
				case <-paused:
				default:
					close(paused)
					<-resume
				}
				return len(p), nil
			}), nil
		})
		done <- err
	}()
	<-paused
	var once sync.Once
	release := func() { once.Do(func() { close(resume) }) }
	t.Cleanup(release) // a failure below must not leave the export's snapshot open
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := f.db.Pool().Acquire(wctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(wctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a prepared statement's second run uses its generic plan
		if _, err := conn.Exec(wctx, `UPDATE deliveries SET updated_at = updated_at WHERE id = $1`, id); err != nil {
			t.Fatalf("an update while the export runs: %v", err)
		}
	}
	if _, err := conn.Exec(wctx, `RESET plan_cache_mode`); err != nil {
		t.Fatal(err)
	}
	f.mk(f.now)
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
