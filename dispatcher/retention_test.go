package dispatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/archive"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestRetentionOneProcessAtATime: while another process makes a retention
// pass, this one skips its own; once that pass is over, it makes one.
func TestRetentionOneProcessAtATime(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	p := newProject(t, db)
	// The days begin today, so an old event is outside every day, in the
	// default partitions: for no endpoint, nothing holds it, the purge
	// takes it.
	if err := db.Store().StartDaysAt(ctx, time.Now(), time.Now(), 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Store().CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}},
		time.Now().Add(-30*24*time.Hour), func(int) string { return "" }); err != nil {
		t.Fatal(err)
	}
	r := &dispatcher.Retention{DB: db, Keep: 14 * 24 * time.Hour, Batch: 10, Clock: webhookd.SystemClock{}}

	holding, release, finished := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := db.AsLeader(ctx, "retention", func(context.Context) error {
			close(holding)
			<-release
			return nil
		})
		finished <- err
	}()
	<-holding
	if ran, purged, err := r.RunOnce(ctx); err != nil || ran || purged != (storage.Purged{}) {
		t.Fatalf("while another pass runs: ran %v, purged %+v, %v; want it skipped", ran, purged, err)
	}
	close(release)
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	if ran, purged, err := r.RunOnce(ctx); err != nil || !ran || purged.Events != 1 {
		t.Fatalf("alone: ran %v, purged %+v, %v; want the old event purged", ran, purged, err)
	}
}

// TestRetentionArchivesADayBeforeItDropsIt: with an archive, a day past
// Keep is written there (and found there by id) before its partitions are
// dropped; a day whose archive fails keeps its partitions and its rows.
func TestRetentionArchivesADayBeforeItDropsIt(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	s := db.Store()
	p := newProject(t, db)
	now := time.Now().UTC()
	old := now.Add(-16 * 24 * time.Hour)
	if err := s.StartDaysAt(ctx, old, now, 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	var u ulid.ULID // old's time, zero randomness
	if err := u.SetTime(ulid.Timestamp(old)); err != nil {
		t.Fatal(err)
	}
	evt, dlv := "evt_"+u.String(), "dlv_"+u.String()
	if _, err := db.Pool().Exec(ctx, `WITH e AS (INSERT INTO events (id, project_id, type, data, created_at) VALUES ($1, $2, 'a', '1', $4))
		INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, status, attempts_count, auto_attempts, created_at)
		VALUES ($3, $2, $1, 'ep_gone', 'a', 'succeeded', 1, 1, $4)`, evt, p.ID, dlv, old); err != nil {
		t.Fatal(err)
	}
	day := "deliveries_p" + old.Format("20060102")
	exists := func() bool {
		var ok bool
		if err := db.Pool().QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, day).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}

	failing := &dispatcher.Retention{DB: db, Keep: 14 * 24 * time.Hour, Clock: webhookd.SystemClock{},
		Logger: slog.New(slog.DiscardHandler), Archive: func(context.Context, time.Time, time.Time) (storage.DayRows, error) {
			return storage.DayRows{}, errors.New("disk full")
		}}
	if _, purged, err := failing.RunOnce(ctx); err != nil || purged.Days != 0 || !exists() {
		t.Fatalf("archive failing: purged %+v, %v, %s still there: %v; want the day kept", purged, err, day, exists())
	}

	dir := t.TempDir()
	a, err := archive.NewArchiver(archive.Config{Dir: dir, Source: db})
	if err != nil {
		t.Fatal(err)
	}
	r := &dispatcher.Retention{DB: db, Keep: 14 * 24 * time.Hour, Clock: webhookd.SystemClock{}, Logger: slog.New(slog.DiscardHandler),
		Archive: func(ctx context.Context, from, to time.Time) (storage.DayRows, error) {
			m, err := a.Archive(ctx, from, to)
			return storage.DayRows{Events: m.Rows("events"), Deliveries: m.Rows("deliveries"), Attempts: m.Rows("attempts"),
				DeadLetters: m.Rows("dead_letters")}, err
		}}
	if _, purged, err := r.RunOnce(ctx); err != nil || purged.Days < 1 || exists() {
		t.Fatalf("archive working: purged %+v, %v, %s still there: %v; want the day dropped", purged, err, day, exists())
	}
	rec, err := archive.Find(dir, dlv)
	if err != nil {
		t.Fatalf("the dropped day's delivery in the archive: %v", err)
	}
	if !strings.Contains(string(rec.Delivery), dlv) || !strings.Contains(string(rec.Event), evt) {
		t.Fatalf("archived record %+v, want %s with its event %s", rec, dlv, evt)
	}
}
