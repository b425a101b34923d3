package conformance

import (
	"context"
	"log/slog"
	"sync"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/bulk"
	"github.com/webhookd/webhookd/storage"
)

// Jobs is the scenario API's Enqueuer (api.Config.Enqueuer): it runs each
// bulk job it is handed at once, in this process, as a worker would
// (bulk.Runner), so that a runner's send_bulk call sees its job finish
// without a worker and Redis queue beside the API. The scenario's projects
// have no endpoints, so there are no deliveries to hand on: Enqueue and
// EnqueueManual do nothing.
type Jobs struct {
	runner *bulk.Runner
	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// NewJobs runs the bulk jobs of db's projects; Close stops them.
func NewJobs(db *storage.DB) *Jobs {
	ctx, stop := context.WithCancel(context.Background())
	return &Jobs{runner: &bulk.Runner{DB: db, Check: api.NewLineChecker(db, 0).Check, Logger: slog.New(slog.DiscardHandler)},
		ctx: ctx, stop: stop}
}

// Enqueue does nothing: the scenario's events have no deliveries.
func (j *Jobs) Enqueue(context.Context, ...webhookd.ScheduledDelivery) error { return nil }

// EnqueueManual does nothing: the scenario redelivers nothing.
func (j *Jobs) EnqueueManual(context.Context, string, string, string) error { return nil }

// EnqueueJob runs the job in the background. A run that fails leaves the
// job queued, and the runner waiting for it then fails the case by its
// own deadline.
func (j *Jobs) EnqueueJob(_ context.Context, jobID string) error {
	j.wg.Go(func() { j.runner.Run(j.ctx, jobID) })
	return nil
}

// Close stops the runs and waits for them.
func (j *Jobs) Close() {
	j.stop()
	j.wg.Wait()
}
