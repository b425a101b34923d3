// Package deadletter runs dead-letter replay jobs (SPEC §4): background jobs
// that replay every dead letter a filter selects, one at a time, with their
// progress kept in PostgreSQL so that a job survives a restart and resumes
// where it stopped.
package deadletter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// DefaultLease is how long a runner holds a job between two progress
// updates unless Replayer.Lease says otherwise.
const DefaultLease = 2 * time.Minute

// batch is how many dead letters Run reads at a time.
const batch = 100

// Replayer runs dead-letter replay jobs.
type Replayer struct {
	DB *storage.DB // required
	// Attempt makes one manual attempt of a delivery on behalf of by and
	// tells whether it succeeded (a 2xx); a succeeded attempt marks the dead
	// letter replayed. Required.
	Attempt func(ctx context.Context, deliveryID, by string) (succeeded bool, err error)
	Logger  *slog.Logger   // default slog.Default()
	Clock   webhookd.Clock // default webhookd.SystemClock
	// Lease is how long a run holds its job between two progress updates,
	// so it must exceed the longest attempt; a run that dies keeps others
	// off the job that long. Default DefaultLease.
	Lease time.Duration
}

// Run runs the job jobID: it claims the job, counts the dead letters its
// filter selects that are not replayed (on the first run), replays them in
// id order through Attempt with by = "job:<id>", storing done, failed_count
// and its cursor after each one, and finishes the job succeeded once every
// one was attempted (failed attempts are counted in failed_count). A job
// whose params cannot be read finishes failed.
//
// A finished, canceled or unknown job is a no-op, and a job canceled while
// it runs stops after the attempt in hand (not counted). A job left half
// done continues after its cursor. A job another run holds returns storage.ErrJobLeased;
// other errors (PostgreSQL, ctx) leave the job to continue on the next run.
func (r *Replayer) Run(ctx context.Context, jobID string) error {
	store, clock, log := r.DB.Store(), r.clock(), r.logger()
	j, err := store.ClaimJob(ctx, jobID, clock.Now(), r.lease())
	switch {
	case errors.Is(err, storage.ErrJobFinished), errors.Is(err, webhookd.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("job %s: %w", jobID, err)
	}
	defer func() { // a no-op once finished; else the next run need not wait for the lease to run out
		if err := store.ReleaseJob(context.WithoutCancel(ctx), j); err != nil {
			log.Warn("dead-letter replay job lease not released; it runs out on its own", "job_id", j.ID, "err", err)
		}
	}()
	f, err := j.Filter()
	if err != nil {
		log.Error("dead-letter replay job cannot run", "job_id", j.ID, "err", err)
		return store.FinishJob(ctx, j, webhookd.JobFailed, err.Error(), clock.Now())
	}
	if !j.Scoped {
		if err := store.ScopeJob(ctx, j, f); err != nil {
			return fmt.Errorf("job %s: %w", j.ID, err)
		}
	}
	log.Info("dead-letter replay job running", "job_id", j.ID, "total", j.Total, "done", j.Done)
	by := "job:" + j.ID
	for {
		list, err := store.JobDeadLetters(ctx, j, f, batch)
		if err != nil {
			return fmt.Errorf("job %s: %w", j.ID, err)
		}
		if len(list) == 0 {
			break
		}
		for _, dl := range list {
			ok, err := r.Attempt(ctx, dl.DeliveryID, by)
			if ctx.Err() != nil {
				return ctx.Err() // not counted: the next run attempts it again
			}
			if err != nil {
				log.Warn("dead-letter replay attempt failed", "job_id", j.ID, "dead_letter_id", dl.ID,
					"delivery_id", dl.DeliveryID, "err", err)
			}
			j.Done++
			if !ok || err != nil {
				j.FailedCount++
			}
			j.Cursor = dl.ID
			err = store.UpdateJobProgress(ctx, j, clock.Now())
			if errors.Is(err, storage.ErrJobCanceled) {
				log.Info("dead-letter replay job canceled", "job_id", j.ID, "done", j.Done-1)
				return nil
			}
			if err != nil {
				return fmt.Errorf("job %s: %w", j.ID, err)
			}
		}
	}
	err = store.FinishJob(ctx, j, webhookd.JobSucceeded, "", clock.Now())
	if errors.Is(err, storage.ErrJobCanceled) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	log.Info("dead-letter replay job succeeded", "job_id", j.ID, "total", j.Total, "done", j.Done,
		"failed_count", j.FailedCount)
	return nil
}

func (r *Replayer) clock() webhookd.Clock {
	if r.Clock == nil {
		return webhookd.SystemClock{}
	}
	return r.Clock
}

func (r *Replayer) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

func (r *Replayer) lease() time.Duration {
	if r.Lease <= 0 {
		return DefaultLease
	}
	return r.Lease
}
