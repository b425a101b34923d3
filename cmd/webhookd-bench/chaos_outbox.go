package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd/client"
)

// The outbox source of the soak: a service database (chaos_outbox) on the
// soak's PostgreSQL server, with webhookd_outbox made by `webhookd outbox
// init` and a business table of its own, chaos_orders, written in the same
// transactions as the outbox rows. The workers reach it through their
// PostgreSQL proxies, so every link fault on a worker cuts its relay too;
// the sender writes on a direct connection, as a service beside webhookd
// would, and sees only PostgreSQL's restarts.

// outboxSourceDB is the name of the soak's service database.
const outboxSourceDB = "chaos_outbox"

// chaosOrdersTable is the service's own table: one row per transaction
// the sender means to commit, so that at the end it says which
// transactions committed whatever their COMMIT answered. Its deferred
// trigger makes each COMMIT take 150 ms of work, as a service's deferred
// checks do, so that a PostgreSQL restart now and then cuts a COMMIT off
// in flight: without it an unanswered COMMIT almost never happens, and the
// ledger's answer to one would go untried.
const chaosOrdersTable = `CREATE TABLE chaos_orders (tx text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now());
CREATE FUNCTION chaos_orders_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_sleep(0.15);
	RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER chaos_orders_check AFTER INSERT ON chaos_orders
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION chaos_orders_check()`

// setupOutboxSource makes the service database, its outbox (through the
// binary, as an operator would) and its business table.
func (s *chaosSystem) setupOutboxSource(ctx context.Context) (err error) {
	if s.outboxDB, err = createDatabase(ctx, s.pg.AdminURL(), outboxSourceDB); err != nil {
		return err
	}
	if _, err := runCommand(ctx, s.opts.Webhookd, s.directEnv(), "outbox", "init", "--database-url", s.outboxDB.URL); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, s.outboxDB.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, chaosOrdersTable)
	return err
}

// outboxSourcesVia is WEBHOOKD_OUTBOX_SOURCES for a process whose
// PostgreSQL proxy listens on proxy: the chaos project's outbox, reached
// through that proxy.
func (s *chaosSystem) outboxSourcesVia(proxy string) string {
	return "WEBHOOKD_OUTBOX_SOURCES=chaos=" + strings.Replace(s.outboxDB.URL, s.pg.Addr(), proxy, 1)
}

// outboxOutcome is what became of one of the sender's transactions, as the
// sender saw it.
type outboxOutcome int

const (
	outboxCommitted  outboxOutcome = iota // COMMIT answered
	outboxRolledBack                      // rolled back on purpose
	outboxFailed                          // failed before COMMIT was sent: nothing committed
	outboxMaybe                           // COMMIT sent, no answer: decided by chaos_orders at the end
)

func (o outboxOutcome) String() string {
	return [...]string{"committed", "rolled back", "failed before commit", "commit unanswered"}[o]
}

// outboxTx is one transaction of the sender: its rows' markers (each row's
// data is {"outbox": marker}) and types, and its outcome.
type outboxTx struct {
	id      string // chaos_orders.tx
	markers []string
	types   []string
	outcome outboxOutcome
	err     error
}

// outboxSender commits outbox rows in transactions of its own on a direct
// connection to the service database, some rolled back on purpose.
type outboxSender struct {
	url string

	mu  sync.Mutex
	txs []*outboxTx
}

// Run makes rate transactions a second of 1 to 3 rows each, one in six
// rolled back, until ctx ends; a connection PostgreSQL dropped is made
// again.
func (o *outboxSender) Run(ctx context.Context, rng *rand.Rand, rate float64) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	next := time.Now()
	for ctx.Err() == nil {
		if conn == nil || conn.IsClosed() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			c, err := pgx.Connect(cctx, o.url)
			cancel()
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
				continue
			}
			conn = c
		}
		tx := o.newTx(rng)
		o.commit(ctx, conn, tx, rng.IntN(6) == 0)
		next = next.Add(time.Duration(float64(time.Second) / rate))
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		} else if d < -5*time.Second {
			next = time.Now()
		}
	}
}

func (o *outboxSender) newTx(rng *rand.Rand) *outboxTx {
	o.mu.Lock()
	defer o.mu.Unlock()
	tx := &outboxTx{id: fmt.Sprintf("tx-%d", len(o.txs))}
	for i := range 1 + rng.IntN(3) {
		tx.markers = append(tx.markers, fmt.Sprintf("ob-%d-%d", len(o.txs), i))
		tx.types = append(tx.types, pickRoomyType(rng))
	}
	o.txs = append(o.txs, tx)
	return tx
}

// commit runs tx: the order, its outbox rows through client.Outbox, then
// COMMIT, or ROLLBACK when rollback. Only an unanswered COMMIT leaves the
// outcome open. It runs to its end after the load's: a transaction cut
// short by the load's end would make an ambiguity of nothing.
func (o *outboxSender) commit(ctx context.Context, conn *pgx.Conn, t *outboxTx, rollback bool) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	set := func(out outboxOutcome, err error) {
		o.mu.Lock()
		t.outcome, t.err = out, err
		o.mu.Unlock()
	}
	tx, err := conn.Begin(tctx)
	if err != nil {
		set(outboxFailed, err)
		return
	}
	_, err = tx.Exec(tctx, "INSERT INTO chaos_orders (tx) VALUES ($1)", t.id)
	for i := 0; err == nil && i < len(t.markers); i++ {
		err = client.Outbox(tctx, tx, client.OutboxEvent{Type: t.types[i], Data: map[string]string{"outbox": t.markers[i]}})
	}
	switch {
	case err != nil:
		tx.Rollback(tctx)
		set(outboxFailed, err)
	case rollback:
		tx.Rollback(tctx) // an error here leaves nothing committed either
		set(outboxRolledBack, nil)
	default:
		if err := tx.Commit(tctx); err != nil {
			set(outboxMaybe, err)
		} else {
			set(outboxCommitted, nil)
		}
	}
}

// Txs is a copy of every transaction made.
func (o *outboxSender) Txs() []outboxTx {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]outboxTx, len(o.txs))
	for i, t := range o.txs {
		out[i] = *t
	}
	return out
}

// sourceState is what the ledger reads from the service database at the
// end: the transactions that committed, and the rows left or refused.
type sourceState struct {
	committed map[string]bool // chaos_orders.tx
	left      int             // rows still in webhookd_outbox
	refused   []string        // markers of rows in webhookd_outbox_refused, with their error code
}

func (s *chaosSystem) readSource(ctx context.Context) (*sourceState, error) {
	conn, err := pgx.Connect(ctx, s.outboxDB.URL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st := &sourceState{committed: make(map[string]bool)}
	rows, err := conn.Query(ctx, "SELECT tx FROM chaos_orders")
	if err != nil {
		return nil, err
	}
	var tx string
	if _, err := pgx.ForEachRow(rows, []any{&tx}, func() error { st.committed[tx] = true; return nil }); err != nil {
		return nil, err
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM webhookd_outbox").Scan(&st.left); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, "SELECT coalesce(data->>'outbox', '?') || ' (' || error_code || ')' FROM webhookd_outbox_refused")
	if err != nil {
		return nil, err
	}
	var r string
	_, err = pgx.ForEachRow(rows, []any{&r}, func() error { st.refused = append(st.refused, r); return nil })
	return st, err
}

// outboxLedger is the verdict on the outbox rows.
type outboxLedger struct {
	Txs, Rows                          int
	TxsCommitted, RowsCommitted        int // COMMIT answered, or unanswered and found in chaos_orders
	TxsRolledBack, TxsFailed           int // on purpose; failed before COMMIT
	TxsMaybe, TxsMaybeCommitted        int // COMMIT unanswered; of them found committed
	CommittedMissing, RolledBackFound  int // transactions chaos_orders contradicts
	RowsMoved                          int // committed rows with their event
	RowsLost                           int // committed rows with no event
	RowsDoubled                        int // rows with more than one event
	RowsUncommittedDelivered           int // rows of transactions that never committed, with an event
	RowsLeft, RowsRefused              int // still in webhookd_outbox; refused by webhookd
	Deliveries, Delivered, DeadLetters int // of the committed rows' events
	NotRouted                          int // to the 410 endpoint once it was disabled
	DeliveriesLost                     int
}

// checkOutbox holds each row of the sender's transactions against the
// service database and webhookd's events (by the row's marker): every
// committed row one event, no other row any.
func checkOutbox(txs []outboxTx, src *sourceState, byMarker map[string][]string, example func(string, ...any)) outboxLedger {
	var l outboxLedger
	l.RowsLeft = src.left
	l.RowsRefused = len(src.refused)
	for _, r := range src.refused {
		example("outbox row %s was refused by webhookd", r)
	}
	for _, t := range txs {
		l.Txs++
		l.Rows += len(t.markers)
		committed := src.committed[t.id]
		switch t.outcome {
		case outboxCommitted:
			if !committed {
				l.CommittedMissing++
				example("outbox %s: COMMIT answered, but its order is not in chaos_orders", t.id)
			}
		case outboxRolledBack:
			l.TxsRolledBack++
		case outboxFailed:
			l.TxsFailed++
		case outboxMaybe:
			l.TxsMaybe++
			if committed {
				l.TxsMaybeCommitted++
			}
		}
		if committed && (t.outcome == outboxRolledBack || t.outcome == outboxFailed) {
			l.RolledBackFound++
			example("outbox %s (%s: %v) is in chaos_orders", t.id, t.outcome, t.err)
		}
		committed = committed || t.outcome == outboxCommitted
		if committed {
			l.TxsCommitted++
			l.RowsCommitted += len(t.markers)
		}
		for _, m := range t.markers {
			evs := byMarker[m]
			switch {
			case len(evs) > 1:
				l.RowsDoubled++
				example("outbox row %s became %d events: %v", m, len(evs), evs)
			case committed && len(evs) == 0:
				l.RowsLost++
				example("outbox row %s (%s, %s) committed but became no event", m, t.id, t.outcome)
			}
			switch {
			case !committed && len(evs) > 0:
				l.RowsUncommittedDelivered++
				example("outbox row %s of %s (%s: %v) never committed but became %v", m, t.id, t.outcome, t.err, evs)
			case committed && len(evs) > 0:
				l.RowsMoved++
			}
		}
	}
	return l
}

// Failures lists how the outbox's ledger does not hold.
func (l outboxLedger) failures(fail func(bool, string, ...any)) {
	fail(l.RowsLost > 0, "%d committed outbox rows became no event", l.RowsLost)
	fail(l.RowsDoubled > 0, "%d outbox rows became more than one event", l.RowsDoubled)
	fail(l.RowsUncommittedDelivered > 0, "%d outbox rows of transactions that never committed became events", l.RowsUncommittedDelivered)
	fail(l.CommittedMissing+l.RolledBackFound > 0, "%d outbox transactions whose outcome the service database contradicts",
		l.CommittedMissing+l.RolledBackFound)
	fail(l.RowsLeft > 0, "%d outbox rows still in webhookd_outbox after the drain", l.RowsLeft)
	fail(l.RowsRefused > 0, "%d outbox rows refused by webhookd", l.RowsRefused)
	fail(l.DeliveriesLost > 0, "%d deliveries of outbox events lost", l.DeliveriesLost)
	fail(l.Rows == 0, "the outbox sender made no row")
}
