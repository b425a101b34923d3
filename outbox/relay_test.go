package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/outbox"
	"github.com/webhookd/webhookd/storage"
)

// env is webhookd's store in a schema of its own, with the project
// "shop", and a service's database (another schema) holding the outbox.
type env struct {
	t       *testing.T
	db      *storage.DB
	project webhookd.Project
	srcURL  string
	src     *pgxpool.Pool // the service's connections
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, db: testenv.DB(t)}
	var err error
	if _, e.project, err = e.db.Store().CreateAPIKey(ctx, "shop", storage.ProjectPlan{}); err != nil {
		t.Fatal(err)
	}
	_, e.srcURL = testenv.Schema(t)
	conn, err := pgx.Connect(ctx, e.srcURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := outbox.Init(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if e.src, err = pgxpool.New(ctx, e.srcURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.src.Close)
	return e
}

// relay starts a relay on the source, with cfg changed by tweak.
func (e *env) relay(tweak func(*outbox.Config)) *outbox.Relay {
	e.t.Helper()
	cfg := outbox.Config{Sources: []outbox.Source{{Project: "shop", DatabaseURL: e.srcURL}},
		Writer: api.OutboxWriter{W: api.NewEventWriter(api.EventWriterConfig{DB: e.db})}, MaxBackoff: 200 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	r, err := outbox.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	r.Start(context.Background())
	e.t.Cleanup(r.Stop)
	return r
}

// insert commits n rows in one transaction of the service, numbered from
// first in their data.
func (e *env) insert(first, n int) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.src.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for i := first; i < first+n; i++ {
		if err := client.Outbox(ctx, tx, client.OutboxEvent{Type: "order.created", Data: json.RawMessage(fmt.Appendf(nil, `{"n":%d}`, i))}); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) count(sql string) int {
	e.t.Helper()
	var n int
	pool := e.db.Pool()
	if sql[0] == '@' { // in the source
		pool, sql = e.src, sql[1:]
	}
	if err := pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// waitMoved waits until the outbox is empty and webhookd holds want
// events, each once.
func (e *env) waitMoved(want int, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := e.count(`@SELECT count(*) FROM webhookd_outbox`)
		events := e.count(`SELECT count(*) FROM events`)
		if left == 0 && events >= want {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("not moved within %v: %d rows left, %d of %d events", within, left, events, want)
		}
		time.Sleep(20 * time.Millisecond) // poll
	}
	distinct := e.count(`SELECT count(DISTINCT data->>'n') FROM events`)
	if events := e.count(`SELECT count(*) FROM events`); events != want || distinct != want {
		e.t.Fatalf("%d events, %d distinct, want %d each", events, distinct, want)
	}
}

func TestInitTwiceKeepsRowsAndSourceID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insert(0, 3)
	ctx := context.Background()
	var before string
	e.src.QueryRow(ctx, `SELECT obj_description('webhookd_outbox'::regclass, 'pg_class')`).Scan(&before)
	var wg sync.WaitGroup
	for range 3 { // again, and at once from three places
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, e.srcURL)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close(ctx)
			if err := outbox.Init(ctx, conn); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var after string
	e.src.QueryRow(ctx, `SELECT obj_description('webhookd_outbox'::regclass, 'pg_class')`).Scan(&after)
	if n := e.count(`@SELECT count(*) FROM webhookd_outbox`); n != 3 || before != after || after == "" {
		t.Fatalf("after init again: %d rows, comment %q then %q", n, before, after)
	}
	// A complete row is type and data; the rest have defaults.
	if _, err := e.src.Exec(ctx, `INSERT INTO webhookd_outbox (type, data) VALUES ('order.created', '{"id":1}')`); err != nil {
		t.Fatal(err)
	}
}

// TestRelayMovesCommittedRowsOnly: rows committed become one event each,
// woken by NOTIFY (the poll is an hour here); a rolled-back transaction's
// rows produce nothing.
func TestRelayMovesCommittedRowsOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.relay(func(c *outbox.Config) { c.Poll = time.Hour })
	ctx := context.Background()
	tx, err := e.src.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Outbox(ctx, tx, client.OutboxEvent{Type: "order.created", Data: map[string]int{"n": -1}}); err != nil {
		t.Fatal(err)
	}
	tx.Rollback(ctx)
	e.insert(0, 10)
	e.waitMoved(10, 10*time.Second)
	e.insert(10, 5)
	e.waitMoved(15, 10*time.Second)
	if n := e.count(`SELECT count(*) FROM events WHERE data->>'n' = '-1'`); n != 0 {
		t.Fatalf("a rolled-back row made %d events", n)
	}
	if n := e.count(`SELECT count(*) FROM idempotency_records WHERE key LIKE 'outbox:%'`); n != 15 {
		t.Fatalf("%d idempotency records for 15 rows", n)
	}
}

// TestRefusedRowsDoNotBlock: a row the write path refuses moves to
// webhookd_outbox_refused with its reason, and the rows around it move.
func TestRefusedRowsDoNotBlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var code, field string
	e.insert(0, 2)
	if _, err := e.src.Exec(ctx, `INSERT INTO webhookd_outbox (type, data) VALUES ('bad type!', '{"n":99}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.src.Exec(ctx, `INSERT INTO webhookd_outbox (type, data, endpoint_ids) VALUES ('a.b', '{"n":98}', '{ep_nope}')`); err != nil {
		t.Fatal(err)
	}
	// Against the catalog: order.created requires data.n to be at most 100.
	if _, err := e.db.Store().CreateEventType(ctx, storage.EventType{ProjectID: e.project.ID, Name: "order.created", Validate: true,
		Schema: []byte(`{"type":"object","properties":{"n":{"type":"integer","maximum":100}}}`)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.src.Exec(ctx, `INSERT INTO webhookd_outbox (type, data) VALUES ('order.created', '{"n":1000}')`); err != nil {
		t.Fatal(err)
	}
	e.insert(2, 2)
	reg := prometheus.NewRegistry()
	e.relay(func(c *outbox.Config) { c.Metrics = reg })
	e.waitMoved(4, 10*time.Second)
	if moved, refused := counter(t, reg, "webhookd_outbox_rows_moved_total"), counter(t, reg, "webhookd_outbox_rows_refused_total"); moved != 7 || refused != 3 {
		t.Errorf("metrics: %v moved, %v refused; want 7 and 3", moved, refused)
	}
	if err := e.src.QueryRow(ctx, `SELECT error_code, coalesce(error_field, '') FROM webhookd_outbox_refused WHERE data->>'n' = '1000'`).Scan(&code, &field); err != nil {
		t.Fatal(err)
	}
	if code != webhookd.CodeValidationFailed || field != "data.n" {
		t.Fatalf("against the schema: refused as %s on %q", code, field)
	}
	if err := e.src.QueryRow(ctx, `SELECT error_code, coalesce(error_field, '') FROM webhookd_outbox_refused WHERE data->>'n' = '99'`).Scan(&code, &field); err != nil {
		t.Fatal(err)
	}
	if code != webhookd.CodeValidationFailed || field != "type" {
		t.Fatalf("refused as %s on %q", code, field)
	}
	if n := e.count(`@SELECT count(*) FROM webhookd_outbox_refused`); n != 3 {
		t.Fatalf("%d refused rows, want 3", n)
	}
}

// TestTwoRelaysNeverAcceptARowTwice: two relays (two workers) on one
// source, while the service commits in many small transactions.
func TestTwoRelaysNeverAcceptARowTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	small := func(c *outbox.Config) { c.Batch = 7 }
	e.relay(small)
	e.relay(small)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 25 {
				e.insert(w*1000+i*3, 3)
			}
		})
	}
	wg.Wait()
	e.waitMoved(300, 30*time.Second)
}

// TestRelayStoppedMidMoveDuplicatesNothing: a relay stopped after
// webhookd committed a batch and before the source deleted it leaves the
// rows; the next relay moves them again, and their keys make no second
// event.
func TestRelayStoppedMidMoveDuplicatesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insert(0, 20)
	var (
		once    sync.Once
		stopped = make(chan struct{})
		r       *outbox.Relay
		ready   = make(chan struct{})
	)
	r = e.relay(func(c *outbox.Config) {
		outbox.SetAfterWrite(c, func(ctx context.Context, n int) {
			once.Do(func() {
				go func() { <-ready; r.Stop(); close(stopped) }()
				<-ctx.Done() // killed here: webhookd has the events, the source still has the rows
			})
		})
	})
	close(ready)
	<-stopped
	if left, events := e.count(`@SELECT count(*) FROM webhookd_outbox`), e.count(`SELECT count(*) FROM events`); left != 20 || events != 20 {
		t.Fatalf("after the stop: %d rows left, %d events; want 20 and 20", left, events)
	}
	e.relay(nil)
	e.waitMoved(20, 10*time.Second)
}

// TestSourceConnectionCutLosesNothing: the source's connections are
// terminated as a batch is between webhookd's commit and the source's
// DELETE; the relay reconnects with backoff, moves the rows again, and
// makes no second event.
func TestSourceConnectionCutLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insert(0, 30)
	var cuts atomic.Int32
	reg := prometheus.NewRegistry()
	e.relay(func(c *outbox.Config) {
		c.Metrics = reg
		c.Sources[0].DatabaseURL += "&application_name=outbox_cut_" + e.project.ID
		c.Batch = 10
		outbox.SetAfterWrite(c, func(ctx context.Context, n int) {
			if cuts.Add(1) > 2 {
				return
			}
			if _, err := e.src.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name = $1`, "outbox_cut_"+e.project.ID); err != nil {
				t.Error(err)
			}
		})
	})
	e.waitMoved(30, 20*time.Second)
	if cuts.Load() < 3 {
		t.Fatalf("%d batches written", cuts.Load())
	}
	if f := counter(t, reg, "webhookd_outbox_move_failures_total"); f < 2 {
		t.Errorf("%v failed batches counted, want at least the 2 cut", f)
	}
}

// TestRowsKeepTheirOrder: rows committed before the relay starts reach an
// ordered endpoint's queue in the order of their ids, across batches.
func TestRowsKeepTheirOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.db.Store().CreateEndpoint(ctx, e.project.ID, storage.NewEndpoint{URL: "http://127.0.0.1:9/",
		Secret: "whsec_AAAA", Ordering: webhookd.OrderingFIFO}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 120; i += 40 {
		e.insert(i, 40)
	}
	e.relay(func(c *outbox.Config) { c.Batch = 50 })
	e.waitMoved(120, 20*time.Second)
	rows, err := e.db.Pool().Query(ctx, `SELECT (e.data->>'n')::int FROM deliveries d JOIN events e ON e.id = d.event_id
		ORDER BY d.fifo_seq`)
	if err != nil {
		t.Fatal(err)
	}
	order, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range order {
		if n != i {
			t.Fatalf("the ordered queue holds row %d at place %d: %v", n, i, order)
		}
	}
	if len(order) != 120 {
		t.Fatalf("%d deliveries", len(order))
	}
}

// counter sums the series of the counter name in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestStatusSaysPerSourceWhetherMovesSucceed: a source whose database
// nobody listens for ends "failing" with a reason that names no host,
// port, user or password, and the reachable one beside it "ok".
func TestStatusSaysPerSourceWhetherMovesSucceed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String() // nothing listens here once closed
	ln.Close()
	_, port, _ := net.SplitHostPort(dead)
	deadURL := "postgres://svcuser:s3cret-pw@" + dead + "/orders?connect_timeout=2"
	r := e.relay(func(c *outbox.Config) {
		c.Sources = append(c.Sources, outbox.Source{Project: "billing", DatabaseURL: deadURL})
	})
	deadline := time.Now().Add(10 * time.Second)
	var got []outbox.SourceStatus
	for {
		got = r.Status()
		if len(got) == 2 && got[0].State == "ok" && got[1].State == "failing" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Status: %+v; want shop ok and billing failing", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got[0].Name != "shop" || got[0].Error != "" || got[1].Name != "billing" ||
		got[1].Error != "cannot connect to the source database" || got[1].Since.IsZero() {
		t.Fatalf("Status: %+v", got)
	}
	for _, leak := range []string{"127.0.0.1", port, "svcuser", "s3cret", "orders", "refused"} {
		if strings.Contains(fmt.Sprintf("%+v", got), leak) {
			t.Errorf("Status %+v leaks %q", got, leak)
		}
	}
}
