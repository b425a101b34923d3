package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// DefaultReconcileMaxPerPass is how many due deliveries one reconciler pass
// offers to the queue at most.
const DefaultReconcileMaxPerPass = 10000

// DefaultReconcileGrace is how long a due delivery is left to its own task
// before the reconciler offers it to the queue again, while the queue has
// a backlog; quietGrace while it has none (fewer than quietBacklog tasks
// wait for a worker). A delivery in a backlog is overdue without anything
// being lost, and offering each again costs two Redis calls; in a quiet
// queue an overdue delivery's wake-up was lost (an enqueue that failed, a
// Redis link cut), and it should go within seconds.
const (
	DefaultReconcileGrace = 10 * time.Second
	quietGrace            = 2 * time.Second
	quietBacklog          = 1000
)

// Reconciler re-enqueues every delivery PostgreSQL says is due. Enqueueing
// uses TaskID = delivery id, so a delivery that still has a live task is
// left alone (asynq answers ErrTaskIDConflict) and one whose task was lost
// with Redis gets a new one; a live task asleep past its delivery's due
// time is run now (Inspector.RunTask), and one that a dead worker took and
// never ran is passed by: the delivery is attempted here (Attempt). It is
// what makes losing Redis, a message or a worker lose nothing.
//
// Every second it also looks for two faults that must not wait for a pass:
// workers that stopped beating (their leases are voided and their
// deliveries attempted here at once, so a killed worker's deliveries are
// attempted again within seconds), and Redis having lost its data (a pass
// then runs at once, with no grace, so the schedule is rebuilt within
// seconds).
//
// One process at a time runs a pass (a leader's turn in PostgreSQL); the
// others skip theirs. A pass looks only at deliveries overdue by more than
// Grace and not held by an attempt, and walks them in order of due time
// from where the previous pass stopped, at most MaxPerPass at a time: a
// lost schedule larger than one pass is rebuilt over several. Deliveries
// that wait for their turn in an ordered queue are left to their turn (the
// queue's head is woken instead), and every other wait has its time in
// next_attempt_at. It also wakes the probes of open circuits whose wake-up
// was lost, and the deliveries held back for room at an endpoint that no
// live worker holds.
type Reconciler struct {
	DB       *storage.DB
	Queue    *Queue
	Interval time.Duration
	Clock    webhookd.Clock
	Logger   *slog.Logger
	// Grace: default DefaultReconcileGrace; negative means none.
	Grace time.Duration
	// MaxPerPass: default DefaultReconcileMaxPerPass.
	MaxPerPass int
	// Attempt, if set, attempts deliveries in the background, without
	// their tasks: those of a dead worker, whose tasks asynq gives back
	// only a minute or two later.
	Attempt func(ctx context.Context, ds []webhookd.ScheduledDelivery)
	// Probe, if set, makes the probe of an endpoint's open circuit in the
	// background, without its task: one a worker took and never ran.
	Probe func(ctx context.Context, ep string)
	// Observe, if set, is told how long each pass that ran took; Offered,
	// how many deliveries it offered; Reenqueued, how many of those had no
	// task and got a new one.
	Observe    func(time.Duration)
	Offered    func(float64)
	Reenqueued func(float64)

	cursor storage.DueCursor
	last   time.Time // when this process last ran a pass
	lost   bool      // Redis lost its data and no pass here has run since
	// backlogOffer is when a pass last offered deliveries while the queue
	// had a backlog.
	backlogOffer time.Time
	loop
}

// reconcileTick is how often the reconciler looks for dead workers and a
// Redis that lost its data.
const reconcileTick = time.Second

// Start runs a pass at once and then every Interval until Stop or ctx
// ends, and the checks for dead workers and lost Redis data every second.
func (r *Reconciler) Start(ctx context.Context) {
	r.start(ctx, min(r.Interval, reconcileTick), r.tick)
}

// tick runs the every-second checks, and a pass when one is due.
func (r *Reconciler) tick(ctx context.Context) {
	lost, err := r.Queue.CheckLost(ctx)
	if err != nil {
		r.Logger.Debug("reconciler: redis check failed", "err", err)
	}
	if lost {
		if r.last.IsZero() {
			r.Logger.Info("redis is new or lost its data: offering every due delivery now")
		} else {
			r.Logger.Warn("redis lost its data: rebuilding the schedule from PostgreSQL now")
		}
		r.lost = true
	}
	voided, err := r.attemptDead(ctx)
	if err != nil {
		r.Logger.Warn("reconciler: voiding dead workers' leases failed", "err", err)
	}
	if !r.lost && voided == 0 && time.Since(r.last) < r.Interval {
		return
	}
	start := time.Now()
	ran, n, err := r.RunOnce(ctx)
	switch {
	case err != nil:
		r.Logger.Warn("reconciler pass failed", "err", err)
	case ran:
		r.last, r.lost = start, false
		if r.Observe != nil {
			r.Observe(time.Since(start))
		}
	}
	if r.Offered != nil {
		r.Offered(float64(n))
	}
	if n > 0 {
		r.Logger.Debug("reconciler pass", "due", n)
	}
}

// attemptDead voids the leases of workers that stopped beating and
// attempts their deliveries here: the dead worker's tasks stay taken in
// asynq until its own recoverer comes by (a minute or two), then find
// their deliveries done or not due. It tells how many leases it voided.
func (r *Reconciler) attemptDead(ctx context.Context) (int, error) {
	voided, _, err := r.DB.VoidDeadLeases(ctx)
	if err != nil || len(voided) == 0 {
		return 0, err
	}
	ds := make([]webhookd.ScheduledDelivery, len(voided))
	for i, v := range voided {
		ds[i] = webhookd.ScheduledDelivery{ID: v.DeliveryID, EndpointID: v.EndpointID}
	}
	r.Logger.Warn("voided the leases of workers that stopped beating; their deliveries are due again", "leases", len(voided))
	if r.Attempt != nil {
		r.Attempt(ctx, ds)
	}
	return len(voided), nil
}

// RunOnce makes one pass if no other process is making one: it registers
// the queue with asynq again (Queue.Register), offers due deliveries to
// the queue (every one, without the grace, after Redis lost its data),
// wakes the heads of ordered queues, the probes of open circuits and
// stranded held deliveries, then offers the pending redeliveries and
// runnable jobs. It tells whether it ran and how many deliveries it
// offered.
func (r *Reconciler) RunOnce(ctx context.Context) (ran bool, offered int, err error) {
	ran, err = r.DB.AsLeader(ctx, "reconciler", func(ctx context.Context) error {
		err := r.Queue.Register(ctx) // after Redis lost its data
		n, offerErr := r.offerDue(ctx, r.lost)
		offered = n
		r.wakeHeads(ctx, r.lost)
		return errors.Join(err, offerErr, r.wakeProbes(ctx), r.wakeStranded(ctx), r.enqueueRedeliveries(ctx), r.enqueueJobs(ctx))
	})
	return ran, offered, err
}

// grace is how long a due delivery is left to its own task.
func (r *Reconciler) grace() time.Duration {
	if r.Grace == 0 {
		return quietGrace
	}
	return max(r.Grace, 0)
}

// offerDue offers the next window of due deliveries to the queue: a
// delivery with no task gets one, a task asleep past its time runs now,
// and one taken by a worker that never ran it is attempted here.
func (r *Reconciler) offerDue(ctx context.Context, lost bool) (int, error) {
	limit := r.MaxPerPass
	if limit <= 0 {
		limit = DefaultReconcileMaxPerPass
	}
	grace := r.grace()
	if lost {
		grace, r.cursor = 0, storage.DueCursor{}
	}
	now := r.Clock.Now()
	due, err := r.DB.Store().DueDeliveries(ctx, now.Add(-grace), now, r.cursor, limit)
	if err != nil {
		return 0, err
	}
	if len(due) < limit {
		r.cursor = storage.DueCursor{} // the end: the next pass starts from the longest overdue again
	} else {
		last := due[len(due)-1]
		r.cursor = storage.DueCursor{At: last.DueAt, ID: last.ID}
	}
	wake := true
	if r.Grace == 0 && !lost && len(due) > 0 && r.backlogged(ctx) {
		// A backlog's deliveries are overdue with nothing lost, and their
		// tasks wait awake: offered (without waking) once per long grace,
		// those overdue by it.
		if time.Since(r.backlogOffer) < DefaultReconcileGrace {
			return 0, nil
		}
		r.backlogOffer, wake = time.Now(), false
		cutoff := now.Add(-DefaultReconcileGrace)
		due = slices.DeleteFunc(due, func(d webhookd.ScheduledDelivery) bool { return d.DueAt.After(cutoff) })
	}
	created, taken, err := r.Queue.offer(ctx, due, wake)
	if r.Reenqueued != nil {
		r.Reenqueued(float64(created))
	}
	if len(taken) > 0 && !lost && r.Attempt != nil {
		// Overdue by the grace, free in PostgreSQL, and its task taken by
		// a worker all that time: the worker died (or lost the task with
		// Redis) before it claimed the delivery.
		r.Logger.Warn("attempting deliveries whose tasks a worker took and never ran", "deliveries", len(taken))
		r.Attempt(ctx, taken)
	}
	return len(due), err
}

// backlogged tells whether asynq's queue has a backlog (asked only when
// something is overdue: at rest a pass costs no look at the queue).
func (r *Reconciler) backlogged(ctx context.Context) bool {
	n, err := r.Queue.Pending(ctx)
	return err != nil || n >= quietBacklog
}

// wakeProbes offers again the probe of every open circuit whose probe is
// overdue by the grace while deliveries wait for it, and runs its task now
// if it sleeps.
func (r *Reconciler) wakeProbes(ctx context.Context) error {
	due, err := r.DB.DueProbes(ctx, r.Clock.Now().Add(-r.grace()))
	if err != nil {
		return err
	}
	for _, p := range due {
		taken, err := r.Queue.EnqueueProbe(ctx, p.EndpointID, p.ProbeAt, true)
		if err != nil {
			return err
		}
		if taken && r.Probe != nil {
			// Overdue by the grace and its task taken all that time (by a
			// worker that never ran it, or whose return Redis lost): the
			// probe is made here, as its task would.
			r.Probe(ctx, p.EndpointID)
		}
	}
	return nil
}

// strandedWake is how many held deliveries of a stranded endpoint a pass
// wakes: a worker's first limit of an endpoint; each that ends wakes the
// next.
const strandedWake = 10

// wakeStranded wakes deliveries held back for room at endpoints that no
// live worker holds (their heartbeats say): no freed slot will wake them
// (the worker that held them died). A worker with requests in flight to
// such an endpoint does not wake them either: its holder wakes only what
// it held itself.
func (r *Reconciler) wakeStranded(ctx context.Context) error {
	eps, err := r.DB.HeldEndpoints(ctx, r.Clock.Now(), 3*heartbeatInterval)
	if err != nil || len(eps) == 0 {
		return err
	}
	loads, err := r.DB.Store().EndpointLoads(ctx, eps)
	if err != nil {
		return err
	}
	for _, ep := range eps {
		if loads[ep].Holding > 0 {
			continue
		}
		ids, err := r.DB.WakeWaiting(ctx, ep, strandedWake, r.Clock.Now())
		if err != nil {
			return err
		}
		r.Queue.Wake(ctx, ep, ids...)
	}
	return nil
}

// enqueueRedeliveries re-enqueues manual attempts asked for and not yet
// made; TaskID = request id, so a live one is left alone.
func (r *Reconciler) enqueueRedeliveries(ctx context.Context) error {
	after := ""
	for {
		list, err := r.DB.Store().PendingRedeliveries(ctx, after, 500)
		if err != nil || len(list) == 0 {
			return err
		}
		for _, m := range list {
			if err := r.Queue.EnqueueManual(ctx, m.RequestID, m.DeliveryID, m.By); err != nil {
				return err
			}
		}
		after = list[len(list)-1].DeliveryID
	}
}

// enqueueJobs re-enqueues background jobs that are queued or running; a job
// whose task is alive is left alone (TaskID = job id).
func (r *Reconciler) enqueueJobs(ctx context.Context) error {
	jobs, err := r.DB.Store().RunnableJobs(ctx)
	if err != nil {
		return err
	}
	for _, id := range jobs {
		if err := r.Queue.EnqueueJob(ctx, id); err != nil {
			return err
		}
	}
	return nil
}
