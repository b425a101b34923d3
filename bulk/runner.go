// Package bulk runs event_bulk jobs (SPEC §2 "Bulk jobs"): the lines of a
// stored NDJSON body are accepted in order through the event write path,
// a chunk per transaction that also records the job's progress, so that a
// job killed mid-way resumes where it stopped and never accepts a line
// twice.
package bulk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// DefaultLease is how long a run holds its job between two chunks unless
// Runner.Lease says otherwise.
const DefaultLease = time.Minute

// Runner runs event_bulk jobs.
type Runner struct {
	DB *storage.DB // required
	// Check reads a line as an event of the project as the event routes
	// would (api.LineChecker.Check): a *webhookd.Error refuses the line,
	// any other error stops the run, to go again later. Required.
	Check func(ctx context.Context, projectID string, line []byte) (storage.NewEvent, error)
	// Enqueuer hands the deliveries of accepted lines to the queue after
	// each chunk's commit; nil: the reconciler finds them.
	Enqueuer webhookd.Enqueuer
	Logger   *slog.Logger   // default slog.Default()
	Clock    webhookd.Clock // default webhookd.SystemClock
	// Lease is how long a run holds its job between two chunks; a run
	// that dies keeps others off the job that long. Default DefaultLease.
	Lease time.Duration
	// afterChunk, for tests, is called after each chunk's commit.
	afterChunk func(j *storage.ClaimedJob)
}

// Run runs the bulk job jobID: it claims the job and, chunk after chunk
// from its cursor, checks each line (Check) and accepts the lines in one
// transaction with the job's progress and refused lines
// (storage.AcceptBulkLines), then enqueues their deliveries. The job ends
// succeeded once every line is done or refused.
//
// A finished, canceled or unknown job is a no-op, and a job canceled while
// it runs stops before its next chunk. A job another run holds returns
// storage.ErrJobLeased; other errors (PostgreSQL, ctx) leave the job to
// continue after its cursor on the next run.
func (r *Runner) Run(ctx context.Context, jobID string) error {
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
			log.Warn("bulk job lease not released; it runs out on its own", "job_id", j.ID, "err", err)
		}
	}()
	log.Info("bulk job running", "job_id", j.ID, "total", j.Total, "done", j.Done, "failed_count", j.FailedCount,
		"cursor_line", j.CursorLine)
	for {
		chunk, ok, err := store.NextBulkChunk(ctx, j)
		if err != nil {
			return fmt.Errorf("job %s: %w", j.ID, err)
		}
		if !ok {
			break
		}
		lines, err := r.read(ctx, j, chunk)
		if err != nil {
			return fmt.Errorf("job %s: line: %w", j.ID, err)
		}
		now := clock.Now()
		evs, err := store.AcceptBulkLines(ctx, j, lines, chunk.FirstLine+chunk.LineCount-1, now)
		if errors.Is(err, storage.ErrJobCanceled) {
			log.Info("bulk job canceled", "job_id", j.ID, "done", j.Done, "failed_count", j.FailedCount)
			return nil
		}
		if err != nil {
			return fmt.Errorf("job %s: %w", j.ID, err)
		}
		r.enqueue(ctx, j, evs, now)
		if r.afterChunk != nil {
			r.afterChunk(j)
		}
	}
	err = store.FinishJob(ctx, j, webhookd.JobSucceeded, "", clock.Now())
	if errors.Is(err, storage.ErrJobCanceled) {
		log.Info("bulk job canceled", "job_id", j.ID, "done", j.Done, "failed_count", j.FailedCount)
		return nil
	}
	if err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	log.Info("bulk job succeeded", "job_id", j.ID, "total", j.Total, "done", j.Done, "failed_count", j.FailedCount)
	return nil
}

// read checks the lines of chunk after j's cursor that are not blank.
func (r *Runner) read(ctx context.Context, j *storage.ClaimedJob, chunk storage.BulkChunk) ([]storage.BulkLine, error) {
	var out []storage.BulkLine
	rest := chunk.Body
	for n := chunk.FirstLine; len(rest) > 0; n++ {
		line, after, _ := bytes.Cut(rest, []byte{'\n'})
		rest = after
		if n <= j.CursorLine || len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		ev, err := r.Check(ctx, j.ProjectID, line)
		var refused *webhookd.Error
		if err != nil && !errors.As(err, &refused) {
			return nil, err
		}
		out = append(out, storage.BulkLine{Line: n, Event: ev, Err: err})
	}
	return out, nil
}

// enqueue hands the deliveries of accepted events to the queue. A failure
// only delays them: they are in PostgreSQL, and the reconciler enqueues
// what is due.
func (r *Runner) enqueue(ctx context.Context, j *storage.ClaimedJob, evs []webhookd.Event, now time.Time) {
	if r.Enqueuer == nil {
		return
	}
	due := webhookd.Scheduled(evs, now)
	if len(due) == 0 {
		return
	}
	if err := r.Enqueuer.Enqueue(ctx, due...); err != nil {
		r.logger().Warn("bulk job: cannot hand new deliveries to the queue; the reconciler will", "job_id", j.ID,
			"deliveries", len(due), "err", err)
	}
}

func (r *Runner) clock() webhookd.Clock {
	if r.Clock == nil {
		return webhookd.SystemClock{}
	}
	return r.Clock
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

func (r *Runner) lease() time.Duration {
	if r.Lease <= 0 {
		return DefaultLease
	}
	return r.Lease
}
