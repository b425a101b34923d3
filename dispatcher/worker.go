package dispatcher

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/tracing"
	"github.com/webhookd/webhookd/internal/warm"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
	"github.com/webhookd/webhookd/wire"
)

// Config configures a Worker. Zero values take the defaults in the comments.
type Config struct {
	DB    *storage.DB           // required
	Redis redis.UniversalClient // required; the caller closes it
	Queue string                // asynq queue; default "webhookd"
	// Schedule is the delays between attempts; default 1m,15m,1h,24h.
	Schedule Schedule
	HTTP     wire.HTTPConfig // timeouts and the private-network switch
	// Concurrency is how many attempts run at once; default 500. No
	// PostgreSQL connection is held through an attempt's request, so this
	// is independent of the pool size.
	Concurrency int
	// EndpointInitialLimit is the concurrency limit an endpoint starts
	// from in this worker; default 10. The limit then adapts to the
	// endpoint (see limiter), between 1 and its max_in_flight. Attempts of
	// every kind count (automatic, test, manual, replay). Those past it
	// wait, held back, without a worker slot and without spending an
	// attempt.
	EndpointInitialLimit int
	// ReconcileInterval is how often due deliveries without a live task
	// are re-enqueued; default 2s. ReconcileGrace is how long overdue a
	// delivery must be before the reconciler offers it; default 2s while
	// the queue has no backlog, 10s while it has, negative for none.
	ReconcileInterval time.Duration
	ReconcileGrace    time.Duration
	// PollInterval is how often an idle worker asks asynq for new tasks;
	// default 10ms. Each look costs webhookd about a quarter of a
	// millisecond of CPU, and it is what an idle webhookd mostly spends: at
	// 5ms, 6% of a core at rest, at 10ms 3%, for an average of 2.7ms more
	// between an enqueue and its pickup (which claimLinger gives back).
	// Scheduled retries are forwarded every 200ms, so a 1 s schedule keeps
	// to about a second.
	PollInterval time.Duration
	// RateLimitPrefix prefixes the per-endpoint limiter's Redis keys;
	// default "webhookd:endpoint-rate:".
	RateLimitPrefix string
	// Retention is how long finished deliveries, their attempts and dead
	// letters are kept; default 336h. RetentionInterval is how often the
	// purge runs; default 1h.
	Retention         time.Duration
	RetentionInterval time.Duration
	// ArchiveDay, when set (WEBHOOKD_ARCHIVE_DIR), archives a day of
	// history before retention drops it (Retention.Archive).
	ArchiveDay func(ctx context.Context, from, to time.Time) (storage.DayRows, error)
	// Circuit is the endpoints' circuit breaker and auto-disable; zero:
	// DefaultCircuit. Circuit.After < 0 turns the breaker off,
	// DisableAfter < 0 auto-disable.
	Circuit storage.CircuitConfig
	// Relays says which relay endpoints have a listener, and HTTP.Relay
	// carries their requests (package relay); nil: a relay endpoint's
	// deliveries wait as if nobody listened.
	Relays Relays
	// Jobs runs background jobs (dead-letter replays); nil: none.
	Jobs    func(ctx context.Context, jobID string) error
	Clock   webhookd.Clock        // default webhookd.SystemClock
	Logger  *slog.Logger          // default slog.Default()
	Metrics prometheus.Registerer // default: a private registry
	// TransformTimeout is how long an endpoint's transformation may run
	// for one delivery (WEBHOOKD_TRANSFORM_TIMEOUT); default
	// transform.DefaultBudget (50ms).
	TransformTimeout time.Duration
	// MaxPayloadBytes bounds the body an endpoint's transformation makes,
	// as the API's setting bounds an event's data
	// (WEBHOOKD_MAX_PAYLOAD_BYTES): a bigger one fails the delivery as a
	// dead letter, transformation_failed; default
	// webhookd.DefaultMaxPayloadBytes (65536).
	MaxPayloadBytes int64
	// Tracer makes each attempt a span, the child of the trace its event
	// was written in, and sends the receiver its traceparent; default nil:
	// no tracing. The attempt's log line carries its ids when Logger is
	// Tracer.Logger's.
	Tracer *tracing.Tracer
}

// WithDefaults fills zero values.
func (c Config) WithDefaults() Config {
	c.Queue = cmp.Or(c.Queue, DefaultQueue)
	if c.Schedule == nil {
		c.Schedule = DefaultSchedule
	}
	c.HTTP = c.HTTP.WithDefaults()
	c.Concurrency = cmp.Or(c.Concurrency, 500)
	c.EndpointInitialLimit = cmp.Or(c.EndpointInitialLimit, 10)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, 2*time.Second)
	c.PollInterval = cmp.Or(c.PollInterval, 10*time.Millisecond)
	c.Retention = cmp.Or(c.Retention, 336*time.Hour)
	c.Circuit.After = cmp.Or(c.Circuit.After, DefaultCircuit.After)
	if len(c.Circuit.Probes) == 0 {
		c.Circuit.Probes = DefaultCircuit.Probes
	}
	c.Circuit.DisableAfter = cmp.Or(c.Circuit.DisableAfter, DefaultCircuit.DisableAfter)
	c.RetentionInterval = cmp.Or(c.RetentionInterval, time.Hour)
	c.TransformTimeout = cmp.Or(c.TransformTimeout, transform.DefaultBudget)
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, webhookd.DefaultMaxPayloadBytes)
	c.RateLimitPrefix = cmp.Or(c.RateLimitPrefix, "webhookd:endpoint-rate:")
	if c.Clock == nil { // an interface: cmp.Or would compare its dynamic value
		c.Clock = webhookd.SystemClock{}
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.DB == nil:
		return errors.New("worker config: DB is required")
	case c.Redis == nil:
		return errors.New("worker config: Redis is required")
	case c.Concurrency < 1:
		return errors.New("worker config: Concurrency must be at least 1")
	case c.EndpointInitialLimit < 1:
		return errors.New("worker config: EndpointInitialLimit must be at least 1")
	case len(c.Schedule) == 0:
		return errors.New("worker config: Schedule is empty")
	case c.Retention < 0:
		return errors.New("worker config: Retention is negative")
	case c.TransformTimeout < 0:
		return errors.New("worker config: TransformTimeout is negative")
	case c.MaxPayloadBytes < 0:
		return errors.New("worker config: MaxPayloadBytes is negative")
	}
	return c.HTTP.Validate()
}

// AttemptTimeout bounds one request, every phase of it: connect, TLS
// handshake (ConnectTimeout each), response headers and body
// (ResponseTimeout each), and a little for signing.
func (c Config) AttemptTimeout() time.Duration {
	return 2*c.HTTP.ConnectTimeout + 2*c.HTTP.ResponseTimeout + 5*time.Second
}

// Lease is how long an attempt holds its delivery: the longest request and
// time to record it. A worker that dies mid-attempt loses it after that.
func (c Config) Lease() time.Duration { return c.AttemptTimeout() + 30*time.Second }

// TaskTimeout is asynq's deadline for one task: above the lease, so that
// asynq never gives a task to another worker while its attempt may still
// be running and recording.
func (c Config) TaskTimeout() time.Duration { return c.Lease() + 10*time.Second }

// Worker processes delivery and job tasks from asynq and runs the
// reconciler, the holder of held-back deliveries and the retention purge
// beside them.
type Worker struct {
	cfg        Config
	bells      *bells // the asynq servers
	Deliverer  *Deliverer
	Queue      *Queue
	reconciler *Reconciler
	retention  *Retention
	heart      loop // the heartbeat; Deliverer.alive is when it last landed
	// attempts are the reconciler's attempts made without a task, on
	// background, the worker's context: at most cap(slots) at once, the
	// worker's concurrency, as many as a dead worker may have had in
	// flight (at 64, a dead worker's 360 attempts to a receiver answering
	// in a second took 8 s longer to come back than through the queue).
	attempts   sync.WaitGroup
	slots      chan struct{}
	background context.Context
	// quit, closed once Stop begins, ends the background attempts still
	// waiting for their time and keeps new ones from starting. quitting
	// orders each new one before Stop's wait for them (sync.WaitGroup's
	// rule): they are rung from goroutines Stop knows nothing of.
	quit     chan struct{}
	quitting sync.RWMutex
	// warm runs attempts on goroutines that outlive a task: asynq starts
	// one per task, and an attempt's call path grew each one's stack anew.
	warm *warm.Pool
}

// NewWorker builds a Worker from cfg (after WithDefaults).
func NewWorker(cfg Config) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	q := NewQueue(cfg.Redis, cfg.Queue, cfg.TaskTimeout())
	g := newGate(cfg.EndpointInitialLimit, 100*time.Millisecond)
	for _, c := range []prometheus.Collector{newQueueCollector(q), newBacklogCollector(cfg.DB, cfg.Clock), newLimitCollector(g)} {
		if err := cfg.Metrics.Register(c); err != nil {
			return nil, err
		}
	}
	clock := &dbClock{base: cfg.Clock}
	d := &Deliverer{db: cfg.DB, sender: wire.Sender{Client: wire.NewHTTPClient(cfg.HTTP), BodyTimeout: cfg.HTTP.ResponseTimeout,
		Tracer: cfg.Tracer}, tracer: cfg.Tracer, schedule: cfg.Schedule, clock: clock,
		log: cfg.Logger, limiter: redis_rate.NewLimiter(cfg.Redis), prefix: cfg.RateLimitPrefix, metrics: m,
		attemptTimeout: cfg.AttemptTimeout(), lease: cfg.Lease(),
		gate: g, holder: newHolder(cfg.DB, q, g, clock, cfg.Logger, m.held), alive: newLiveness(), worker: storage.NewWorkerID(),
		circuit: storage.CircuitConfig{After: max(cfg.Circuit.After, 0), Probes: cfg.Circuit.Probes,
			DisableAfter: max(cfg.Circuit.DisableAfter, 0)}, relays: cfg.Relays,
		transforms: transform.NewEngine(transform.Config{Budget: cfg.TransformTimeout, MaxOutput: int(cfg.MaxPayloadBytes)})}
	w := &Worker{cfg: cfg, Deliverer: d, Queue: q, warm: warm.New(time.Minute), slots: make(chan struct{}, cfg.Concurrency),
		quit: make(chan struct{}),
		reconciler: &Reconciler{DB: cfg.DB, Queue: q, Interval: cfg.ReconcileInterval, Grace: cfg.ReconcileGrace,
			Clock: clock, Logger: cfg.Logger, Observe: m.observeReconcile, Offered: m.offered.Add, Reenqueued: m.reenqueued.Add},
		retention: &Retention{DB: cfg.DB, Keep: cfg.Retention, Interval: cfg.RetentionInterval, Clock: cfg.Clock,
			Logger: cfg.Logger, Archive: cfg.ArchiveDay}}
	w.reconciler.Attempt = w.attemptInBackground
	// A probe whose task a worker took and never ran; should PostgreSQL
	// fail it, the reconciler's next pass finds it overdue again.
	w.reconciler.Probe = func(_ context.Context, ep string) {
		w.inBackground(time.Time{}, func() { _ = w.probe(w.background, ep) })
	}
	q.stuck = w.attemptInBackground
	w.bells = &bells{redis: cfg.Redis, n: bellsFor(cfg.Concurrency),
		log: cfg.Logger, running: func(n int) { m.servers.Set(float64(n)) }, tick: bellTick, idle: bellIdle,
		config: func(i, n int) asynq.Config {
			c := asynq.Config{
				Concurrency:              shareOf(cfg.Concurrency, i, n),
				Queues:                   map[string]int{cfg.Queue: 1},
				TaskCheckInterval:        cfg.PollInterval,
				DelayedTaskCheckInterval: 200 * time.Millisecond, // scheduled retries keep to about a second
				RetryDelayFunc:           retryDelay,
				IsFailure:                func(err error) bool { return !isRetryAt(err) },
				Logger:                   asynqLogger{cfg.Logger},
				LogLevel:                 asynq.WarnLevel,
				ShutdownTimeout:          cfg.AttemptTimeout() + 10*time.Second, // in-flight attempts finish and are recorded
			}
			if i > 0 {
				// The first server forwards scheduled retries; an extra's
				// forwarder only repeats its work, at asynq's own pace.
				c.DelayedTaskCheckInterval = 5 * time.Second
			}
			return c
		}}
	return w, nil
}

// batchLinger is how long a record or hold flush waits for more after its
// first. Each flush is one statement, and PostgreSQL pays for a statement
// (its executor, its tables' constraints read from text) whatever rows it
// carries, so fuller flushes cost less per delivery.
const batchLinger = 5 * time.Millisecond

// circuitLinger is how long a flush of the breaker's outcomes waits for
// more after its first: short, since each outcome's attempt holds a worker
// slot until it is counted, and an endpoint failing under load sends more
// while the flush before runs anyway.
const circuitLinger = time.Millisecond

// claimLinger is batchLinger for claims, shorter: a claim's wait comes
// before the request, so every delivery's latency pays it, where a
// record's comes after. Under load claims gather anyway while the flush
// before them runs.
const claimLinger = 2 * time.Millisecond

// Start begins processing and reconciling.
func (w *Worker) Start(ctx context.Context) error {
	d := w.Deliverer
	// PostgreSQL's clock before the first claim, which reads it again.
	c := d.clock.(*dbClock)
	sent := c.sent()
	if now, err := d.db.Now(ctx); err == nil {
		c.learn(now, sent)
	}
	claimSize, recordSize := d.metrics.groups.WithLabelValues("claim"), d.metrics.groups.WithLabelValues("record")
	d.claims = newBatcher(256, claimLinger, 30*time.Second, func(ctx context.Context, cs []storage.Claim) ([]storage.Lease, error) {
		claimSize.Observe(float64(len(cs)))
		return d.claimNow(ctx, cs)
	})
	d.records = newBatcher(256, batchLinger, 30*time.Second, func(ctx context.Context, rs []storage.Record) ([]bool, error) {
		recordSize.Observe(float64(len(rs)))
		return d.recordAttempts(ctx, rs)
	})
	circuitSize := d.metrics.groups.WithLabelValues("circuit")
	d.circuits = newBatcher(256, circuitLinger, 30*time.Second, func(ctx context.Context, outs []storage.CircuitOutcome) ([][]storage.CircuitChange, error) {
		circuitSize.Observe(float64(len(outs)))
		return d.applyCircuits(ctx, outs)
	})
	d.releases = newBatcher(256, batchLinger, 30*time.Second, d.db.ReleaseLeases)
	d.holder.holds = newBatcher(256, batchLinger, 30*time.Second, func(ctx context.Context, hs []storage.Hold) ([]bool, error) {
		return make([]bool, len(hs)), d.db.HoldBack(ctx, d.clock.Now(), hs)
	})
	w.background = ctx
	mux := asynq.NewServeMux()
	mux.HandleFunc(TaskDelivery, w.handleDelivery)
	mux.HandleFunc(TaskJob, w.handleJob)
	mux.HandleFunc(TaskProbe, func(ctx context.Context, t *asynq.Task) error { return w.probe(ctx, string(t.Payload())) })
	mux.HandleFunc(TaskRegister, func(context.Context, *asynq.Task) error { return nil })
	if err := w.bells.start(mux); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	w.heart.start(ctx, heartbeatInterval, w.beat)
	w.reconciler.Start(ctx)
	w.retention.Start(ctx)
	d.holder.Start(ctx)
	return nil
}

// heartbeatInterval is how often a worker tells PostgreSQL it is alive;
// storage.WorkerStale after its last beat, its leases are void.
const heartbeatInterval = time.Second

// beat records that this worker is alive, with its endpoints' limits and
// requests in flight for the dashboard, the endpoints it holds deliveries
// of (for the reconciler), and when it landed (Deliverer.alive). A
// failure is logged once, until a beat lands again: with beats every
// second, a log line each would flood the log of a worker cut off from
// PostgreSQL.
func (w *Worker) beat(ctx context.Context) {
	sent := time.Now()
	d := w.Deliverer
	loads := d.gate.loads()
	d.holder.holding(loads)
	err := w.cfg.DB.Beat(ctx, d.worker, loads)
	switch {
	case err == nil:
		if d.alive.landed(sent) {
			w.cfg.Logger.Info("heartbeats land again")
		}
	case ctx.Err() != nil: // stopping
	case d.alive.failed():
		ago, ok := d.alive.since(time.Now())
		w.cfg.Logger.Warn("heartbeat failed; once the last that landed is older than storage.WorkerStale, "+
			"other processes void this worker's leases", "err", err, "last_landed_ago", ago, "ever_landed", ok)
	}
}

// ID is the worker process's id, which its heartbeat and leases carry.
func (w *Worker) ID() string { return w.Deliverer.worker }

// Stop takes no new work, lets the attempts in flight finish (bounded by
// their timeouts) and records them, then stops the background loops.
func (w *Worker) Stop() {
	if w.Deliverer.claims == nil {
		return // never started, or stopped already
	}
	w.quitting.Lock()
	close(w.quit)
	w.quitting.Unlock()
	w.reconciler.Stop()
	w.retention.Stop()
	w.Deliverer.holder.Stop()
	w.bells.shutdown()
	w.attempts.Wait() // the reconciler's attempts of a dead worker's deliveries
	w.Deliverer.holder.holds.Stop()
	w.Deliverer.claims.Stop()
	w.Deliverer.records.Stop()
	w.Deliverer.circuits.Stop()
	w.Deliverer.releases.Stop()
	w.Deliverer.claims, w.Deliverer.records, w.Deliverer.circuits, w.Deliverer.releases = nil, nil, nil, nil
	// Every attempt is recorded and its lease given up: the heartbeat can
	// end. (Killed instead, the worker stops beating and its leases are
	// voided once it is stale.)
	w.heart.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.cfg.DB.Retire(ctx, w.Deliverer.worker); err != nil {
		w.cfg.Logger.Warn("retiring the worker's heartbeat failed", "err", err)
	}
}

// handleDelivery makes the attempt a delivery task asks for, on a warm
// goroutine (asynq runs each task on a new one).
func (w *Worker) handleDelivery(ctx context.Context, t *asynq.Task) error {
	w.bells.taken()
	defer w.bells.finished()
	var p deliveryTask
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		w.cfg.Logger.Error("dropping a delivery task with a bad payload", "err", err)
		return nil
	}
	var err error
	w.warm.Run(func() {
		_, err = w.Deliverer.Attempt(ctx, Request{DeliveryID: p.DeliveryID, EndpointID: p.EndpointID, Manual: p.Manual,
			RequestID: p.RequestID, By: p.By})
	})
	if errors.Is(err, ErrEndpointDisabled) {
		return nil // logged; a manual attempt is not retried
	}
	return err
}

// probe makes the probe of endpoint ep's open circuit, on its task or,
// the task taken and never run, for the reconciler: the longest-waiting
// delivery its circuit holds is made due and attempted here; its attempt
// takes the probe (Decide). No delivery waits: nothing to probe with, and
// the next delivery to come is the probe.
func (w *Worker) probe(ctx context.Context, ep string) error {
	id, notYet, err := w.cfg.DB.ProbeCandidate(ctx, ep, w.Deliverer.clock.Now())
	switch {
	case err != nil:
		return err
	case notYet != nil: // this clock is behind PostgreSQL's: at the probe's time
		return &RetryAt{At: *notYet, Reason: "probe not due yet"}
	case id != "":
		// Attempted here, not woken through the delivery's own task: that
		// one may have been taken by a worker that never ran it (a dequeue
		// whose reply Redis lost), which asynq gives back only when its
		// lease runs out.
		res, err := w.Deliverer.Attempt(ctx, Request{DeliveryID: id, EndpointID: ep})
		w.Queue.settle(ctx, ep, id, res, err)
	}
	return nil
}

// attemptInBackground attempts deliveries without their tasks, each at
// its due time (inBackground): the reconciler's, for deliveries whose
// tasks a dead worker holds in asynq, and the queue's for those whose
// tasks stay taken (Queue.stuck). An attempt that leaves its delivery
// waiting moves the delivery's task to then (Queue.settle), or, the task
// still taken, rings the delivery here again at that time.
func (w *Worker) attemptInBackground(_ context.Context, ds []webhookd.ScheduledDelivery) {
	for _, sd := range ds {
		w.inBackground(sd.DueAt, func() {
			res, err := w.Deliverer.Attempt(w.background, Request{DeliveryID: sd.ID, EndpointID: sd.EndpointID})
			switch {
			case isRetryAt(err):
				w.Queue.settle(w.background, sd.EndpointID, sd.ID, res, err)
			case err != nil:
				w.cfg.Logger.Debug("background attempt failed; the reconciler offers it again", "delivery_id", sd.ID, "err", err)
			}
		})
	}
}

// inBackground runs f at time at, or now, on a goroutine of the attempts
// made without a task, holding one of their slots (a few at a time),
// unless the worker stops first.
func (w *Worker) inBackground(at time.Time, f func()) {
	w.quitting.RLock()
	defer w.quitting.RUnlock()
	select {
	case <-w.quit:
		return
	default:
	}
	w.attempts.Go(func() {
		select {
		case <-time.After(time.Until(at)): // at once for a zero or past time
		case <-w.quit:
			return
		}
		w.slots <- struct{}{}
		defer func() { <-w.slots }()
		f()
	})
}

func isRetryAt(err error) bool { var r *RetryAt; return errors.As(err, &r) }

func (w *Worker) handleJob(ctx context.Context, t *asynq.Task) error {
	if w.cfg.Jobs == nil {
		return errors.New("this worker runs no jobs")
	}
	return w.cfg.Jobs(ctx, string(t.Payload()))
}

// retryDelay brings a *RetryAt task back at its time, never early: asynq
// keeps retry times in whole seconds (truncated), so the delay is rounded
// up to the next whole second. A task whose attempt failed with an error
// (PostgreSQL unreachable, say) comes back a second after its first such
// failure, two after its second, and so on up to errorRetryMax (retried
// counts only failures: a RetryAt is none). So the deliveries whose claims
// met a PostgreSQL restart go within a second or two of its end, and a
// long outage costs a task a look every few seconds, not a storm.
func retryDelay(retried int, err error, _ *asynq.Task) time.Duration {
	var r *RetryAt
	if !errors.As(err, &r) {
		return min(time.Second<<min(retried, 3), errorRetryMax) // capped before the shift overflows
	}
	at := r.At.Add(time.Second - time.Nanosecond).Truncate(time.Second) // r.At rounded up
	return max(time.Until(at), 0)
}

const errorRetryMax = 5 * time.Second

// asynqLogger sends asynq's log lines to slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }
