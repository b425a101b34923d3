package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

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

// RunOnce enqueues every due delivery and returns how many it looked at.
func (r *Reconciler) RunOnce(ctx context.Context) (int, error) {
	const page = 500
	now := r.Clock.Now()
	after, total := "", 0
	for {
		due, err := r.DB.Store().DueDeliveries(ctx, now, after, page)
		if err != nil {
			return total, err
		}
		if len(due) == 0 {
			return total, errors.Join(r.enqueueRedeliveries(ctx), r.enqueueJobs(ctx))
		}
		if err := r.Queue.Enqueue(ctx, due...); err != nil {
			return total, err
		}
		total += len(due)
		after = due[len(due)-1].ID
	}
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
