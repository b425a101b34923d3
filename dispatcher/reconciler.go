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

// Reconciler re-enqueues every delivery PostgreSQL says is due. Enqueueing
// uses TaskID = delivery id, so a delivery that still has a live task is
// left alone (asynq answers ErrTaskIDConflict) and one whose task was lost
// with Redis gets a new one. It is what makes losing Redis lose nothing.
type Reconciler struct {
	DB       *storage.DB
	Queue    *Queue
	Interval time.Duration
	Clock    webhookd.Clock
	Logger   *slog.Logger
	// MaxPerPass bounds one pass, so a large backlog of due deliveries
	// (each a Redis call, most answered "already queued") costs a bounded
	// amount every Interval; default DefaultReconcileMaxPerPass. A lost
	// schedule larger than that is rebuilt over several passes.
	MaxPerPass int

	loop
}

// Start runs a pass at once and then every Interval until Stop or ctx ends.
func (r *Reconciler) Start(ctx context.Context) {
	r.start(ctx, r.Interval, func(ctx context.Context) {
		if n, err := r.RunOnce(ctx); err != nil {
			r.Logger.Warn("reconciler pass failed", "err", err)
		} else if n > 0 {
			r.Logger.Debug("reconciler pass", "due", n)
		}
	})
}

// RunOnce offers the due deliveries to the queue, the longest overdue
// first and at most MaxPerPass of them, then the pending redeliveries and
// runnable jobs. It returns how many deliveries it offered.
func (r *Reconciler) RunOnce(ctx context.Context) (int, error) {
	limit := r.MaxPerPass
	if limit <= 0 {
		limit = DefaultReconcileMaxPerPass
	}
	due, err := r.DB.Store().DueDeliveries(ctx, r.Clock.Now(), limit)
	if err != nil {
		return 0, err
	}
	if err := r.Queue.Enqueue(ctx, due...); err != nil {
		return 0, err
	}
	return len(due), errors.Join(r.enqueueRedeliveries(ctx), r.enqueueJobs(ctx))
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
