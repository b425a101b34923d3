package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/wire"
)

// TestIDBoundIsTheSQLOne: the bounds Go gives the days' partitions are
// the ones the migration gave the legacy partitions, and ULIDs minted in a
// day fall between its bounds in PostgreSQL's order of text.
func TestIDBoundIsTheSQLOne(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	for _, at := range []time.Time{
		time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC),
		time.Date(2031, 2, 28, 13, 7, 1, 999e6, time.UTC),
		time.Unix(0, 0).UTC(),
	} {
		var sql string
		if err := db.Pool().QueryRow(ctx, `SELECT 'dlv_' || webhookd_ulid_prefix($1)`, at).Scan(&sql); err != nil {
			t.Fatal(err)
		}
		if got := storage.IDBound("dlv_", at); got != sql {
			t.Errorf("IDBound(%s) = %s, SQL says %s", at, got, sql)
		}
		lo, hi := storage.IDBound("dlv_", at), storage.IDBound("dlv_", at.Add(24*time.Hour))
		for _, in := range []time.Time{at, at.Add(time.Millisecond), at.Add(24*time.Hour - time.Millisecond)} {
			id := "dlv_" + ulid.MustNew(ulid.Timestamp(in), ulid.DefaultEntropy()).String()
			var inside bool
			if err := db.Pool().QueryRow(ctx, `SELECT $1 >= $2 AND $1 < $3`, id, lo, hi).Scan(&inside); err != nil || !inside {
				t.Errorf("%s (%s) not in [%s, %s): %v", id, in, lo, hi, err)
			}
		}
	}
}

// TestDeliveriesShareTheirEventsDay: a delivery's id carries its event's
// time, so an event and its deliveries are in the same day's partitions.
func TestDeliveriesShareTheirEventsDay(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	ctx := context.Background()
	if _, err := f.s.CreateEndpoint(ctx, f.p.ID, storage.NewEndpoint{URL: "http://127.0.0.1:9/b", Secret: "whsec_AAAA"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	evs, err := f.s.CreateEvents(ctx, f.p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}}, time.Now(), func(int) string { return "" })
	if err != nil || len(evs[0].Deliveries) != 2 {
		t.Fatalf("%+v, %v", evs, err)
	}
	for _, d := range evs[0].Deliveries {
		if d.ID[4:14] != evs[0].ID[4:14] {
			t.Errorf("delivery %s does not carry the time of its event %s", d.ID, evs[0].ID)
		}
	}
}

// TestDayDroppedWholeUnlessADeliveryWaits: a day's partitions go in one
// drop with its events' external ids, but not while a delivery of the day
// waits for an attempt; the days ahead are made following the last one.
func TestDayDroppedWholeUnlessADeliveryWaits(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	ctx := context.Background()
	now := time.Now().UTC()
	made, err := f.s.EnsurePartitions(ctx, now, 72*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tomorrow := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if len(made) != 3 || !made[0].Lo.Equal(tomorrow) || made[0].Suffix != "p"+tomorrow.Format("20060102") ||
		!made[2].Hi.Equal(tomorrow.Add(72*time.Hour)) {
		t.Fatalf("made %+v, want the 3 days from %s", made, tomorrow)
	}
	if again, err := f.s.EnsurePartitions(ctx, now, 72*time.Hour); err != nil || len(again) != 0 {
		t.Fatalf("made again %+v, %v", again, err)
	}

	ext := "order-1"
	evs, err := f.s.CreateEvents(ctx, f.p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1"), ExternalID: &ext}}, now, func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	done, waiting := evs[0].Deliveries[0].ID, f.mk(now)
	f.finish(done, webhookd.DeliveryDeadLetter, webhookd.ReasonExhausted)
	var where string
	if err := f.db.Pool().QueryRow(ctx, `SELECT tableoid::regclass::text FROM deliveries WHERE id = $1`, done).Scan(&where); err != nil || where != "deliveries_legacy" {
		t.Fatalf("today's delivery in %q (%v), want deliveries_legacy", where, err)
	}
	days, err := f.s.Days(ctx)
	if err != nil || len(days) != 4 || days[0].Suffix != "legacy" {
		t.Fatalf("days %+v, %v", days, err)
	}

	if err := f.s.DropDay(ctx, days[0]); !errors.Is(err, storage.ErrDayWaits) {
		t.Fatalf("drop with a delivery waiting: %v, want ErrDayWaits", err)
	}
	if _, err := f.s.GetDelivery(ctx, f.p.ID, done); err != nil {
		t.Fatalf("a refused drop lost a delivery: %v", err)
	}
	f.finish(waiting, webhookd.DeliverySucceeded, "")
	// A dead letter leased by a replay keeps its day while the lease is on
	// it: the attempt's record must find its row.
	ls, err := f.db.ClaimDeliveries(ctx, now, now.Add(time.Minute),
		[]storage.Claim{{DeliveryID: done, Token: "req_replay", Mode: storage.ClaimReplay}})
	if err != nil || !ls[0].Held {
		t.Fatalf("replay lease: %+v, %v", ls, err)
	}
	if err := f.s.DropDay(ctx, days[0]); !errors.Is(err, storage.ErrDayWaits) {
		t.Fatalf("drop with a dead letter leased by a replay: %v, want ErrDayWaits", err)
	}
	if _, err := f.db.ReleaseLease(ctx, done, "req_replay", "", now); err != nil {
		t.Fatal(err)
	}
	if err := f.s.DropDay(ctx, days[0]); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := f.db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM deliveries)
		+ (SELECT count(*) FROM attempts) + (SELECT count(*) FROM dead_letters) + (SELECT count(*) FROM event_external_ids)
		+ (SELECT count(*) FROM pg_class WHERE relname LIKE '%\_legacy' AND relnamespace = current_schema()::regnamespace)`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows or legacy tables left after the drop (%v)", left, err)
	}
	// The external id went with its event.
	if _, err := f.s.CreateEvents(ctx, f.p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1"), ExternalID: &ext}}, now, func(int) string { return "" }); err != nil {
		t.Fatalf("the external id of a dropped event: %v", err)
	}
	if days, _ := f.s.Days(ctx); len(days) != 3 || days[0].Suffix == "legacy" {
		t.Fatalf("days after the drop: %+v", days)
	}
}

// TestPopulatedHistoryMigratesAndDelivers migrates a database that holds
// history from before the partitions (a delivery waiting, one succeeded
// with its attempt, one dead-lettered, an event with an external id) and
// then delivers: the waiting one arrives, a new event with the old
// external id is refused naming the old event, a new event arrives, and
// retention keeps the legacy partition while the waiting delivery waits.
func TestPopulatedHistoryMigratesAndDelivers(t *testing.T) {
	t.Parallel()
	name, _ := testenv.Schema(t)
	ctx := context.Background()
	db := openSchema(t, ctx, name, 0)
	if err := storage.MigrateTo(ctx, db, 23); err != nil {
		t.Fatal(err)
	}
	var got atomic.Int32
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
	t.Cleanup(rc.Close)
	s := db.Store()
	_, p, err := s.CreateAPIKey(ctx, "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := s.CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: rc.URL, Secret: "whsec_AAAA"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id := func(prefix string) string { return prefix + ulid.Make().String() }
	evt, waiting, done, dead := id("evt_"), id("dlv_"), id("dlv_"), id("dlv_")
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO events (id, project_id, type, data, external_id) VALUES ($1, $2, 'a', '{}', 'order-1')`, evt, p.ID)
	b.Queue(`INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, status, attempts_count, auto_attempts, next_attempt_at)
		VALUES ($1, $4, $5, $6, 'a', 'pending', 0, 0, now()), ($2, $4, $5, $6 || 'x', 'a', 'succeeded', 1, 1, NULL),
			($3, $4, $5, $6 || 'y', 'a', 'dead_letter', 1, 1, NULL)`, waiting, done, dead, p.ID, evt, ep.ID)
	b.Queue(`INSERT INTO attempts (delivery_id, number, request_id, url, trigger, status_code, duration_ms, started_at)
		VALUES ($1, 1, 'req_' || $1, 'http://x', 'auto', 200, 1, now()), ($2, 1, 'req_' || $2, 'http://x', 'auto', 500, 1, now())`, done, dead)
	b.Queue(`INSERT INTO dead_letters (id, project_id, delivery_id, event_id, endpoint_id, event_type, reason, last_status_code)
		VALUES ('dl_' || $1, $2, $1, $3, $4, 'a', 'exhausted', 500)`, dead, p.ID, evt, ep.ID)
	if err := db.Pool().SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	var kinds string
	if err := db.Pool().QueryRow(ctx, `SELECT string_agg(relkind::text, '' ORDER BY relname) FROM pg_class
		WHERE relname IN ('events', 'deliveries', 'attempts', 'dead_letters') AND relnamespace = $1::regnamespace`, name).Scan(&kinds); err != nil || kinds != "pppp" {
		t.Fatalf("relkinds %q (%v), want four partitioned tables", kinds, err)
	}
	var n int
	if err := db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM events_legacy) + (SELECT count(*) FROM deliveries_legacy)
		+ (SELECT count(*) FROM attempts_legacy) + (SELECT count(*) FROM dead_letters_legacy)`).Scan(&n); err != nil || n != 7 {
		t.Fatalf("%d rows in the legacy partitions (%v), want 7", n, err)
	}
	if dls, err := s.DashboardDeadLettersByID(ctx, []string{"dl_" + dead}); err != nil || len(dls) != 1 || dls[0].DeliveryID != dead {
		t.Fatalf("dead letter after the migration: %+v, %v", dls, err)
	}
	ext := "order-1"
	_, err = s.CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1"), ExternalID: &ext}}, time.Now(), func(int) string { return "" })
	var werr *webhookd.Error
	if !errors.As(err, &werr) || werr.Code != webhookd.CodeExternalIDTaken || werr.ExistingID != evt {
		t.Fatalf("an external id from before the migration: %v, want external_id_taken naming %s", err, evt)
	}

	rdb, _ := testenv.Redis(t)
	w, err := dispatcher.NewWorker(dispatcher.Config{DB: db, Redis: rdb, Schedule: dispatcher.Schedule{time.Second},
		HTTP:        wire.HTTPConfig{AllowPrivateNetworks: true, ConnectTimeout: 2 * time.Second, ResponseTimeout: 2 * time.Second},
		Concurrency: 4, ReconcileInterval: 100 * time.Millisecond, ReconcileGrace: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Circuit: storage.CircuitConfig{After: -1, DisableAfter: -1}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	if err := w.Start(wctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); w.Stop() })
	if _, err := s.CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("2")}}, time.Now(), func(int) string { return "" }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := s.GetDelivery(ctx, p.ID, waiting)
		if err == nil && d.Status == webhookd.DeliverySucceeded && got.Load() >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 deliveries received (the waiting one, the new one); the waiting one: %+v, %v", got.Load(), d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClaimAndRecordAcrossDays: the claim and the record name the day
// partition of each delivery (storage.dayRoutes), so a batch whose
// deliveries are of two days runs one statement a day, and each record
// lands on its own delivery, in its own day, with its dead letter there.
func TestClaimAndRecordAcrossDays(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	ctx := context.Background()
	now := time.Now().UTC()
	yesterday := now.Truncate(24 * time.Hour).Add(-time.Hour)
	if err := f.s.StartDaysAt(ctx, yesterday, now, 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	today := f.mk(now)
	// A delivery minted yesterday (its event's time), waiting.
	evt := storage.IDBound("evt_", yesterday) + "0000000000000000"
	old := storage.IDBound("dlv_", yesterday) + "0000000000000000"
	if _, err := f.db.Pool().Exec(ctx, `WITH e AS (INSERT INTO events (id, project_id, type, data) VALUES ($1, $2, 'a', '1'))
		INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, next_attempt_at)
		SELECT $3, $2, $1, id, 'a', now() FROM endpoints WHERE project_id = $2`, evt, f.p.ID, old); err != nil {
		t.Fatal(err)
	}
	ids := []string{old, today}
	cs := make([]storage.Claim, len(ids))
	for i, id := range ids {
		cs[i] = storage.Claim{DeliveryID: id, Token: storage.NewRequestID()}
	}
	ls, err := f.db.ClaimDeliveries(ctx, now, now.Add(time.Minute), cs)
	if err != nil {
		t.Fatal(err)
	}
	rs := make([]storage.Record, len(ids))
	for i := range ids {
		if !ls[i].Held || ls[i].Delivery.ID != ids[i] || ls[i].Event.Type != "a" {
			t.Fatalf("claim %d: %+v", i, ls[i])
		}
		code := 500
		rs[i] = storage.Record{Lease: &ls[i], Attempt: &webhookd.Attempt{Number: 1, RequestID: cs[i].Token, URL: "http://x",
			Trigger: "auto", StatusCode: &code, StartedAt: now},
			Transition: storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonExhausted, Auto: true, Now: now}}
	}
	applied, _, err := f.db.RecordAttempts(ctx, rs)
	if err != nil || !applied[0] || !applied[1] {
		t.Fatalf("record: %v, %v", applied, err)
	}
	for i, id := range ids {
		want := "p" + yesterday.Format("20060102")
		if i == 1 {
			want = "p" + now.Format("20060102")
		}
		var d, a, l, status string
		if err := f.db.Pool().QueryRow(ctx, `SELECT d.tableoid::regclass::text, d.status,
				(SELECT a.tableoid::regclass::text FROM attempts a WHERE a.delivery_id = d.id),
				(SELECT l.tableoid::regclass::text FROM dead_letters l WHERE l.delivery_id = d.id)
			FROM deliveries d WHERE d.id = $1`, id).Scan(&d, &status, &a, &l); err != nil {
			t.Fatal(err)
		}
		if status != webhookd.DeliveryDeadLetter || d != "deliveries_"+want || a != "attempts_"+want || l != "dead_letters_"+want {
			t.Fatalf("%s: %s in %s, its attempt in %s, its dead letter in %s; want all in %s", id, status, d, a, l, want)
		}
	}
}

// TestEnsurePartitionsPassesOverABegunDayTheDefaultHolds: when no worker
// made days for longer than ahead while the API accepted events, the rows
// of a day not made went to the default partitions, and PostgreSQL
// refuses a partition whose rows its default holds. The day is passed
// over — its rows stay where they are, found as before — and the days
// after it are made: retention goes on instead of failing every pass.
func TestEnsurePartitionsPassesOverABegunDayTheDefaultHolds(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := f.s.EnsurePartitions(ctx, now, 72*time.Hour); err != nil {
		t.Fatal(err)
	}
	day4 := now.Truncate(24 * time.Hour).Add(4 * 24 * time.Hour) // the days made end here
	later := day4.Add(time.Hour)
	evs, err := f.s.CreateEvents(ctx, f.p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}}, later,
		func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	id := evs[0].Deliveries[0].ID
	var where string
	if err := f.db.Pool().QueryRow(ctx, `SELECT tableoid::regclass::text FROM deliveries WHERE id = $1`, id).Scan(&where); err != nil ||
		where != "deliveries_default" {
		t.Fatalf("a delivery of a day not made is in %q (%v), want deliveries_default", where, err)
	}
	made, err := f.s.EnsurePartitions(ctx, later, 72*time.Hour)
	if err != nil {
		t.Fatalf("making days after a pause: %v", err)
	}
	if len(made) != 3 || !made[0].Lo.Equal(day4.Add(24*time.Hour)) {
		t.Fatalf("made %+v, want the 3 days after %s (passed over)", made, day4)
	}
	if _, err := f.s.GetDelivery(ctx, f.p.ID, id); err != nil {
		t.Fatalf("the delivery of the day passed over: %v", err)
	}
}

// TestCreatedAtIndexedOnlyWhereThePurgeReads: the created_at indexes of
// events and deliveries serve the purge of the default partitions alone
// (migration 26), so a day's partitions are made without them — an entry
// each event and each ended delivery would write for no reader — and the
// purge still finds the default partitions' rows by age through them.
func TestCreatedAtIndexedOnlyWhereThePurgeReads(t *testing.T) {
	t.Parallel()
	f := newPurgeFixture(t)
	ctx := context.Background()
	if _, err := f.s.EnsurePartitions(ctx, time.Now(), 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	rows, err := f.db.Pool().Query(ctx, `SELECT tablename FROM pg_indexes
		WHERE schemaname = current_schema() AND (tablename LIKE 'events%' OR tablename LIKE 'deliveries%')
			AND indexdef LIKE '%(created_at)%' ORDER BY tablename`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"deliveries_default", "events_default"}; !slices.Equal(tables, want) {
		t.Errorf("created_at indexed on %v, want on %v alone", tables, want)
	}
	for _, q := range []struct{ sql, index string }{
		{`SELECT id FROM deliveries_default WHERE created_at < now() AND next_attempt_at IS NULL ORDER BY created_at LIMIT 10`,
			"deliveries_default_created_idx"},
		{`SELECT id FROM events_default WHERE created_at < now() ORDER BY created_at LIMIT 10`, "events_default_created_idx"},
	} {
		plan := explainWithoutSeqScans(t, f.db.Pool(), q.sql)
		if !strings.Contains(plan, q.index) {
			t.Errorf("the purge's look for old rows does not use %s:\n%s", q.index, plan)
		}
	}
}

// explainWithoutSeqScans is the plan of sql where the planner avoids
// sequential scans (a young table is small enough for one to win).
func explainWithoutSeqScans(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, sql string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN "+sql)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
