package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd"
)

// Row is one committed row of a source's webhookd_outbox.
type Row struct {
	ID          int64
	Type        string
	Data        json.RawMessage
	ExternalID  *string
	EndpointIDs []string // nil: every subscribed endpoint
	CreatedAt   time.Time
}

// Writer accepts rows into webhookd through its event write path.
type Writer interface {
	// Write accepts rows into the project named project, row i under
	// idempotency key keys[i], and returns for each row nil (accepted, now
	// or before under its key) or the client error that refused it
	// (remembered under its key as well). Its error is any other failure:
	// then some rows may have been accepted, and writing them again under
	// their keys makes no second event.
	Write(ctx context.Context, project string, keys []string, rows []Row) ([]*webhookd.Error, error)
}

// Config configures a Relay.
type Config struct {
	Sources []Source
	Writer  Writer
	Logger  *slog.Logger // default slog.Default()
	// Poll is how often a source is read without a notification: the
	// floor under LISTEN/NOTIFY (default 1s).
	Poll time.Duration
	// Batch is the most rows moved in one transaction (default 500).
	Batch int
	// MaxBackoff bounds the wait before trying again a source or a write
	// that failed (default 5s; the first wait is 100ms, doubling).
	MaxBackoff time.Duration
	// Metrics registers the relay's counters (default: a registry of its
	// own, read by nobody).
	Metrics prometheus.Registerer

	// afterWrite, in tests, runs once a batch is written to webhookd and
	// before it is deleted from its source.
	afterWrite func(ctx context.Context, n int)
}

// WithDefaults fills in the zero fields.
func (c Config) WithDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	if c.Batch <= 0 {
		c.Batch = 500
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Second
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	return c
}

// Validate names the bad field.
func (c Config) Validate() error {
	if c.Writer == nil {
		return errors.New("outbox: Writer is required")
	}
	for _, s := range c.Sources {
		if _, err := pgx.ParseConfig(s.DatabaseURL); err != nil {
			return fmt.Errorf("outbox: source of project %s: not a PostgreSQL URL", s.Project)
		}
	}
	return nil
}

// Relay moves the committed rows of each source into webhookd and deletes
// them from the source: each row becomes one event, its idempotency key
// ("outbox:" + the table's source id + ":" + the row's id) deciding its
// outcome once. A row webhookd refuses moves to webhookd_outbox_refused.
// Per source it keeps one connection listening for the table's
// notifications and one pool connection for the moves; it reads the table
// every Poll as well. Two relays on one source take turns (an advisory
// lock in the source, held for one batch), so rows go oldest first as far
// as commits allow, and the key is the last guard against a row moved
// twice (a relay that stopped after webhookd's commit and before the
// source's).
type Relay struct {
	cfg     Config
	metrics *metrics
	stop    context.CancelFunc
	wg      sync.WaitGroup
	movers  []*mover // one per source, from Start
}

// metrics are the relay's counters, by source (Source.String: project,
// host, port and database, never a password).
type metrics struct {
	moved, refused, failures *prometheus.CounterVec
}

// New returns a Relay of cfg.
func New(cfg Config) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &metrics{
		moved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "webhookd_outbox_rows_moved_total",
			Help: "Outbox rows moved into webhookd and deleted from their source, refused ones included."}, []string{"source"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "webhookd_outbox_rows_refused_total",
			Help: "Outbox rows webhookd refused, moved to webhookd_outbox_refused in their source."}, []string{"source"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "webhookd_outbox_move_failures_total",
			Help: "Batches of outbox rows that failed (source or webhookd unreachable) and are tried again."}, []string{"source"}),
	}
	for _, c := range []prometheus.Collector{m.moved, m.refused, m.failures} {
		if err := cfg.Metrics.Register(c); err != nil {
			return nil, fmt.Errorf("outbox: metrics: %w", err)
		}
	}
	return &Relay{cfg: cfg, metrics: m}, nil
}

// Start begins moving every source in the background, until Stop or ctx
// ends. A source that cannot be reached is tried again with backoff.
func (r *Relay) Start(ctx context.Context) {
	ctx, r.stop = context.WithCancel(context.WithoutCancel(ctx))
	names, now := sourceNames(r.cfg.Sources), time.Now().UTC()
	for i, src := range r.cfg.Sources {
		name := src.String()
		m := &mover{src: src, cfg: r.cfg, log: r.cfg.Logger.With("outbox_source", name),
			moved: r.metrics.moved.WithLabelValues(name), refused: r.metrics.refused.WithLabelValues(name),
			failures: r.metrics.failures.WithLabelValues(name)}
		m.status.s = SourceStatus{Name: names[i], State: "starting", Since: now}
		r.movers = append(r.movers, m)
		r.wg.Go(func() { m.run(ctx) })
	}
}

// Status says, for each source in the order of Config.Sources, whether its
// last poll or move succeeded, since when, and if not why (SourceStatus);
// nil before Start.
func (r *Relay) Status() []SourceStatus {
	out := make([]SourceStatus, 0, len(r.movers))
	for _, m := range r.movers {
		out = append(out, m.status.get())
	}
	return out
}

// Stop stops the relay and waits for its moves: one under way is rolled
// back in its source (a batch already accepted by webhookd is moved again
// later, and replays its keys).
func (r *Relay) Stop() {
	if r.stop != nil {
		r.stop()
	}
	r.wg.Wait()
}

// backoff is the wait before try n (1-based) after a failure: 100ms,
// doubling, at most max.
func backoff(n int, max time.Duration) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// mover moves one source.
type mover struct {
	src  Source
	cfg  Config
	log  *slog.Logger
	pool *pgxpool.Pool

	moved, refused, failures prometheus.Counter
	status                   status // the last poll's outcome, for Relay.Status
}

// run moves the source when woken (its notifications), every Poll, and
// again at once while batches come full; after a failure it waits its
// backoff, deaf to notifications, before trying again.
func (m *mover) run(ctx context.Context) {
	wake := make(chan struct{}, 1)
	var listener sync.WaitGroup
	listener.Go(func() { m.listen(ctx, wake) })
	defer listener.Wait()
	defer func() {
		if m.pool != nil {
			m.pool.Close()
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	fails := 0
	for {
		woken := wake
		if fails > 0 {
			woken = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-woken:
			if !t.Stop() {
				select { // a fire not yet taken
				case <-t.C:
				default:
				}
			}
		case <-t.C:
		}
		full, err := m.moveBatch(ctx)
		if ctx.Err() != nil {
			return
		}
		m.status.record(err, time.Now())
		switch {
		case err != nil:
			m.failures.Inc()
			fails++
			wait := backoff(fails, m.cfg.MaxBackoff)
			m.log.Warn("outbox: moving rows failed; trying again", "err", err, "failures", fails, "retry_in", wait)
			t.Reset(wait)
		case full:
			fails = 0
			t.Reset(0)
		default:
			if fails > 0 {
				m.log.Info("outbox: moving rows again")
			}
			fails = 0
			t.Reset(m.cfg.Poll)
		}
	}
}

// listen keeps a connection of its own listening on Channel, and wakes
// run at each notification and at each new connection (rows may have come
// while there was none). A lost connection is made again with backoff.
func (m *mover) listen(ctx context.Context, wake chan<- struct{}) {
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	fails := 0
	for ctx.Err() == nil {
		conn, err := pgx.Connect(ctx, m.src.DatabaseURL)
		if err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+Channel); err == nil {
				fails = 0
				poke()
				for {
					if _, err = conn.WaitForNotification(ctx); err != nil {
						break
					}
					poke()
				}
			}
			conn.Close(context.Background())
		}
		if ctx.Err() != nil {
			return
		}
		fails++
		wait := backoff(fails, m.cfg.MaxBackoff)
		m.log.Debug("outbox: listening failed; polling meanwhile", "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// moveLock is the transaction-level advisory lock a batch holds in its
// source: one relay moves a table at a time. It is taken without waiting;
// a relay that finds it held leaves the rows to the holder, who goes on
// while its batches come full, and reads again at its next wake or poll.
const moveLock = `SELECT pg_try_advisory_xact_lock(hashtextextended('webhookd_outbox move ' || 'webhookd_outbox'::regclass::oid, 0))`

// selectRows reads the oldest committed rows. FOR UPDATE SKIP LOCKED
// passes over a row that a transaction of the service holds (an UPDATE or
// DELETE of its own) rather than wait for it.
const selectRows = `SELECT id, type, data, external_id, endpoint_ids, created_at
	FROM webhookd_outbox ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`

// deleteRows deletes the moved rows ($1), and moves those refused ($2,
// with the reason in $3-$5) to webhookd_outbox_refused, in one statement.
const deleteRows = `WITH gone AS (
		DELETE FROM webhookd_outbox WHERE id = ANY($1) RETURNING *
	)
	INSERT INTO webhookd_outbox_refused (id, type, data, external_id, endpoint_ids, created_at, error_code, error_message, error_field)
	SELECT g.id, g.type, g.data, g.external_id, g.endpoint_ids, g.created_at, r.code, r.message, NULLIF(r.field, '')
	FROM gone g JOIN unnest($2::int8[], $3::text[], $4::text[], $5::text[]) AS r(id, code, message, field) ON r.id = g.id
	ON CONFLICT (id) DO NOTHING`

// batchTimeout bounds one batch, so that a source or a webhookd that stops
// answering (a silent network) fails the batch instead of holding it;
// rollbackTimeout bounds its rollback after a failure.
const (
	batchTimeout    = 30 * time.Second
	rollbackTimeout = 5 * time.Second
)

// moveBatch moves the oldest rows of the source, at most Batch, in one
// source transaction: lock, read, write them to webhookd, delete them,
// commit. It reports whether the batch was full (more may wait). A
// failure anywhere rolls the source back: the rows stay, and those
// webhookd accepted replay their keys when moved again.
func (m *mover) moveBatch(ctx context.Context) (full bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	if m.pool == nil {
		cfg, err := pgxpool.ParseConfig(m.src.DatabaseURL)
		if err != nil {
			return false, fmt.Errorf("source url: %w", err)
		}
		cfg.MaxConns = 1 // batches run one at a time
		if m.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return false, err
		}
	}
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
		defer cancel()
		tx.Rollback(ctx) // after a commit, a no-op
	}()
	var locked bool
	if err := tx.QueryRow(ctx, moveLock).Scan(&locked); err != nil || !locked {
		return false, err
	}
	source, err := readSourceID(ctx, tx)
	if err != nil {
		return false, err
	}
	rows, err := tx.Query(ctx, selectRows, m.cfg.Batch)
	if err != nil {
		return false, err
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var row Row
		err := r.Scan(&row.ID, &row.Type, &row.Data, &row.ExternalID, &row.EndpointIDs, &row.CreatedAt)
		return row, err
	})
	if err != nil || len(batch) == 0 {
		return false, err
	}
	keys := make([]string, len(batch))
	for i, row := range batch {
		keys[i] = Key(source, row.ID)
	}
	refused, err := m.cfg.Writer.Write(ctx, m.src.Project, keys, batch)
	if err != nil {
		return false, writeError{err}
	}
	if m.cfg.afterWrite != nil {
		m.cfg.afterWrite(ctx, len(batch))
	}
	ids := make([]int64, len(batch))
	var bad struct {
		ids                    []int64
		codes, messages, field []string
	}
	for i, row := range batch {
		ids[i] = row.ID
		if e := refused[i]; e != nil {
			bad.ids, bad.codes = append(bad.ids, row.ID), append(bad.codes, e.Code)
			bad.messages, bad.field = append(bad.messages, e.Message), append(bad.field, e.Field)
			m.log.Warn("outbox: row refused; moved to webhookd_outbox_refused", "row_id", row.ID, "type", row.Type,
				"code", e.Code, "message", e.Message)
		}
	}
	if _, err := tx.Exec(ctx, deleteRows, ids, bad.ids, bad.codes, bad.messages, bad.field); err != nil {
		return false, fmt.Errorf("delete moved rows: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("delete moved rows: %w", err)
	}
	m.moved.Add(float64(len(batch)))
	m.refused.Add(float64(len(bad.ids)))
	m.log.Debug("outbox: rows moved", "rows", len(batch), "refused", len(bad.ids))
	return len(batch) == m.cfg.Batch, nil
}

// Key is the idempotency key of row id of the outbox whose source id is
// source, in its project.
func Key(source string, id int64) string {
	return fmt.Sprintf("outbox:%s:%d", source, id)
}
