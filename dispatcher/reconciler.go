package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// DefaultReconcileMaxPerPass is how many due deliveries one reconciler pass
// offers to the queue at most.
const DefaultReconcileMaxPerPass = 10000

// DefaultReconcileGrace is how long a due delivery is left to its own task
// before the reconciler offers it to the queue again.
const DefaultReconcileGrace = 10 * time.Second

// Reconciler re-enqueues every delivery PostgreSQL says is due. Enqueueing
// uses TaskID = delivery id, so a delivery that still has a live task is
// left alone (asynq answers ErrTaskIDConflict) and one whose task was lost
// with Redis gets a new one. It is what makes losing Redis lose nothing.
//
// Every second it also looks for two faults that must not wait for a pass:
// workers that stopped beating (their leases are voided and their tasks
// put back in the queue, so a killed worker's deliveries are attempted
// again within seconds), and Redis having lost its data (a pass then runs
// at once, with no grace, so the schedule is rebuilt within seconds).
//
// One process at a time runs a pass (a PostgreSQL advisory lock); the
// others skip theirs. A pass looks only at deliveries overdue by more than
// Grace and not held by an attempt, and walks them in order of due time
// from where the previous pass stopped, at most MaxPerPass at a time: a
// backlog that stays due (held back by its endpoint, say) cannot keep the
// rest from being looked at, and a lost schedule larger than one pass is
// rebuilt over several. Of those, it offers the queue the ones the holder
// does not hold back: a held one's task sleeps until the holder wakes it.
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
	// Observe, if set, is told how long each pass that ran took; Offered,
	// how many deliveries it offered; Reenqueued, how many of those had no
	// task and got a new one.
	Observe    func(time.Duration)
	Offered    func(float64)
	Reenqueued func(float64)

	cursor storage.DueCursor
	last   time.Time // when this process last ran a pass
	lost   bool      // Redis lost its data and no pass here has run since
	dead   time.Time // when this process last found a worker dead
	loop
}

// reconcileTick is how often the reconciler looks for dead workers and a
// Redis that lost its data.
const reconcileTick = time.Second

// deadWorkerWatch is how long after finding a worker dead the reconciler
// looks every tick for the tasks it had taken: long enough for every lease
// it extended last to have missed an extension.
const deadWorkerWatch = 30 * time.Second

// Start runs a pass at once and then every Interval until Stop or ctx
// ends, and the checks for dead workers and lost Redis data every second.
func (r *Reconciler) Start(ctx context.Context) {
	r.start(ctx, min(r.Interval, reconcileTick), func(ctx context.Context) {
		r.tick(ctx)
	})
}

// tick runs the every-second checks, and a pass when one is due.
func (r *Reconciler) tick(ctx context.Context) {
	lost, err := r.Queue.CheckLost(ctx)
	if err != nil {
		r.Logger.Debug("reconciler: redis check failed", "err", err)
	}
	if lost {
		msg := "redis lost its data: rebuilding the schedule from PostgreSQL now"
		if r.last.IsZero() {
			r.Logger.Info("redis is new or lost its data: offering every due delivery now")
		} else {
			r.Logger.Warn(msg)
		}
		r.lost = true
	}
	voided, err := r.requeueDead(ctx)
	if err != nil {
		r.Logger.Warn("reconciler: voiding dead workers' leases failed", "err", err)
	}
	if time.Since(r.dead) < deadWorkerWatch {
		// The dead worker's dequeued tasks that no lease names: back once
		// they have missed its lease extensions, within the watch.
		if n, err := r.Queue.RecoverDeadWorkersTasks(ctx, time.Now()); err == nil && n > 0 {
			r.Logger.Warn("put back tasks a dead worker had taken", "tasks", n)
		}
	}
	if !r.lost && voided == 0 && time.Since(r.last) < r.Interval {
		return
	}
	start := time.Now()
	ran, n, err := r.runOnce(ctx, r.lost)
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

// requeueDead voids the leases of workers that stopped beating and puts
// their deliveries' tasks back in the queue: the ones the dead worker had
// dequeued go back in front of pending; a delivery without a live task
// gets one. It tells how many leases it voided.
func (r *Reconciler) requeueDead(ctx context.Context) (int, error) {
	voided, dead, err := r.DB.VoidDeadLeases(ctx)
	if dead > 0 {
		r.dead = time.Now()
	}
	if err != nil || len(voided) == 0 {
		return 0, err
	}
	ids := make([]string, 0, len(voided))
	for _, v := range voided {
		ids = append(ids, v.DeliveryID)
		if v.ManualRequest != nil {
			ids = append(ids, *v.ManualRequest)
		}
	}
	moved, err := r.Queue.RequeueActive(ctx, ids, time.Now())
	if err != nil {
		return len(voided), err
	}
	requeued := map[string]bool{}
	for i, id := range ids {
		if moved[i] {
			requeued[id] = true
		}
	}
	var lost []webhookd.ScheduledDelivery
	now := r.Clock.Now()
	for _, v := range voided {
		if !requeued[v.DeliveryID] {
			lost = append(lost, webhookd.ScheduledDelivery{ID: v.DeliveryID, EndpointID: v.EndpointID, DueAt: now})
		}
	}
	r.Logger.Warn("voided the leases of workers that stopped beating; their deliveries are due again",
		"leases", len(voided), "tasks_requeued", len(requeued))
	_, err = r.Queue.EnqueueCounting(ctx, lost...) // a live task (scheduled, pending) is left alone
	return len(voided), err
}

// RunOnce makes one pass if no other process is making one: it registers
// the queue with asynq again (Queue.Register), puts orphaned tasks back in
// the queue (Queue.RecoverOrphans), offers due deliveries to the queue,
// then the pending redeliveries and runnable jobs.
// It tells whether it ran and how many deliveries it offered.
func (r *Reconciler) RunOnce(ctx context.Context) (ran bool, offered int, err error) {
	return r.runOnce(ctx, false)
}

// runOnce is RunOnce; lost (Redis lost its data) offers every due
// delivery, without the grace.
func (r *Reconciler) runOnce(ctx context.Context, lost bool) (ran bool, offered int, err error) {
	ran, err = r.DB.AsLeader(ctx, "reconciler", func(ctx context.Context) error {
		err := r.Queue.Register(ctx)                                  // after Redis lost its data
		orphans, orphanErr := r.Queue.RecoverOrphans(ctx, time.Now()) // asynq's leases are on the wall clock
		err = errors.Join(err, orphanErr)
		if orphans > 0 && r.Logger != nil {
			r.Logger.Warn("recovered tasks that a worker dequeued and never ran", "tasks", orphans)
		}
		n, offerErr := r.offerDue(ctx, lost)
		offered = n
		r.promoteHeads(ctx)
		return errors.Join(err, offerErr, r.enqueueRedeliveries(ctx), r.enqueueJobs(ctx))
	})
	return ran, offered, err
}

// grace is how long a due delivery is left to its own task.
func (r *Reconciler) grace() time.Duration {
	switch {
	case r.Grace == 0:
		return DefaultReconcileGrace
	case r.Grace < 0:
		return 0
	}
	return r.Grace
}

// offerDue offers the next window of due deliveries to the queue, but for
// those the holder holds back: their tasks sleep until their endpoint has
// room, and the holder wakes them then.
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
	eps, ids := make([]string, len(due)), make([]string, len(due))
	for i, d := range due {
		eps[i], ids[i] = d.EndpointID, d.ID
	}
	held, err := r.Queue.held(ctx, eps, ids)
	if err != nil {
		return 0, err
	}
	offer := due[:0]
	for i, d := range due {
		if !held[i] {
			offer = append(offer, d)
		}
	}
	created, err := r.Queue.EnqueueCounting(ctx, offer...)
	if r.Reenqueued != nil {
		r.Reenqueued(float64(created))
	}
	return len(offer), err
}

// enqueueRedeliveries re-enqueues manual attempts asked for and not yet
// made, but for those the holder holds back; TaskID = request id, so a
// live one is left alone.
func (r *Reconciler) enqueueRedeliveries(ctx context.Context) error {
	after := ""
	for {
		list, err := r.DB.Store().PendingRedeliveries(ctx, after, 500)
		if err != nil || len(list) == 0 {
			return err
		}
		eps, ids := make([]string, len(list)), make([]string, len(list))
		for i, m := range list {
			eps[i], ids[i] = m.EndpointID, m.RequestID
		}
		held, err := r.Queue.held(ctx, eps, ids)
		if err != nil {
			return err
		}
		for i, m := range list {
			if held[i] {
				continue
			}
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
