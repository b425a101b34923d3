package deadletter_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/deadletter"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// fixture is a project on a real PostgreSQL schema with dead letters.
type fixture struct {
	t       *testing.T
	db      *storage.DB
	project string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db := testenv.DB(t)
	_, p, err := db.Store().CreateAPIKey(context.Background(), "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, db: db, project: p.ID}
}

func (f *fixture) endpoint() string {
	f.t.Helper()
	e, err := f.db.Store().CreateEndpoint(context.Background(), f.project,
		storage.NewEndpoint{URL: "http://127.0.0.1:9/hook", Secret: "whsec_dGVzdA=="}, time.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	return e.ID
}

// deadLetters makes n events of type typ for the endpoint and dead-letters
// their deliveries; it returns the delivery ids, oldest first.
func (f *fixture) deadLetters(endpointID, typ string, n int) []string {
	f.t.Helper()
	ctx := context.Background()
	var ids []string
	for range n {
		evs, err := f.db.Store().CreateEvents(ctx, f.project, []storage.NewEvent{{Type: typ, Data: []byte(`{}`),
			EndpointIDs: []string{endpointID}}}, time.Now(), func(int) string { return "" })
		if err != nil {
			f.t.Fatal(err)
		}
		id := evs[0].Deliveries[0].ID
		testenv.Record(f.t, f.db, id, webhookd.Attempt{StatusCode: new(500)}, storage.Transition{
			Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonExhausted})
		ids = append(ids, id)
	}
	return ids
}

func (f *fixture) job(filter storage.DeadLetterFilter) string {
	f.t.Helper()
	j, err := f.db.Store().CreateJob(context.Background(), f.project, filter, time.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	return j.ID
}

func (f *fixture) getJob(id string) webhookd.Job {
	f.t.Helper()
	j, err := f.db.Store().GetJob(context.Background(), f.project, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return j
}

// attempts is a fake Attempt: it records every call and fails for the ids
// in fail. A success marks the dead letter replayed, as a real manual
// attempt does.
type attempts struct {
	db    *storage.DB
	t     testing.TB
	fail  map[string]error // nil error: the receiver refused it
	mu    sync.Mutex
	calls []string
	by    []string
	// before, when set, runs first and may stop the call.
	before func(ctx context.Context, n int) error
}

func (a *attempts) attempt(ctx context.Context, deliveryID, by string) (bool, error) {
	a.mu.Lock()
	n := len(a.calls)
	a.mu.Unlock()
	if a.before != nil {
		if err := a.before(ctx, n); err != nil {
			return false, err
		}
	}
	a.mu.Lock()
	a.calls, a.by = append(a.calls, deliveryID), append(a.by, by)
	a.mu.Unlock()
	if err, failed := a.fail[deliveryID]; failed {
		return false, err
	}
	testenv.Record(a.t, a.db, deliveryID, webhookd.Attempt{StatusCode: new(200), Trigger: webhookd.TriggerManual},
		storage.Transition{Status: webhookd.DeliverySucceeded, ReplayedBy: by})
	return true, nil
}

func (f *fixture) replayer(a *attempts) *deadletter.Replayer {
	a.db, a.t = f.db, f.t
	return &deadletter.Replayer{DB: f.db, Attempt: a.attempt, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func TestReplayerRunsAJobToTheEnd(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	a, b := f.endpoint(), f.endpoint()
	onA := f.deadLetters(a, "order.created", 5)
	f.deadLetters(b, "order.created", 2)
	f.deadLetters(a, "user.created", 1)
	id := f.job(storage.DeadLetterFilter{EndpointID: a, EventType: "order.created"})

	fake := &attempts{fail: map[string]error{onA[1]: nil, onA[3]: errors.New("database went away")}}
	if err := f.replayer(fake).Run(ctx, id); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fake.calls, onA) {
		t.Fatalf("attempted %v, want %v in id order", fake.calls, onA)
	}
	for _, by := range fake.by {
		if by != "job:"+id {
			t.Fatalf("attempt by %q", by)
		}
	}
	j := f.getJob(id)
	if j.Status != webhookd.JobSucceeded || j.Total != 5 || j.Done != 5 || j.FailedCount != 2 || j.FinishedAt == nil {
		t.Fatalf("job %+v", j)
	}
	list, _, err := f.db.Store().ListDeadLetters(ctx, f.project, storage.DeadLetterFilter{EndpointID: a, EventType: "order.created"},
		storage.Page{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, dl := range list {
		failed := dl.DeliveryID == onA[1] || dl.DeliveryID == onA[3]
		if failed != (dl.ReplayedAt == nil) || !failed && *dl.ReplayedBy != "job:"+id {
			t.Fatalf("dead letter %s replayed at %v by %v", dl.DeliveryID, dl.ReplayedAt, dl.ReplayedBy)
		}
	}

	// A second run of a finished job does nothing.
	if err := f.replayer(fake).Run(ctx, id); err != nil {
		t.Fatal(err)
	}
	if again := f.getJob(id); len(fake.calls) != 5 || again.Status != j.Status || again.Done != j.Done ||
		!again.FinishedAt.Equal(*j.FinishedAt) {
		t.Fatalf("second run: %d calls, job %+v", len(fake.calls), f.getJob(id))
	}

	// A job over nothing succeeds at once; an unknown job is a no-op.
	empty := f.job(storage.DeadLetterFilter{EndpointID: "ep_nope"})
	if err := f.replayer(fake).Run(ctx, empty); err != nil {
		t.Fatal(err)
	}
	if j := f.getJob(empty); j.Status != webhookd.JobSucceeded || j.Total != 0 || j.FinishedAt == nil {
		t.Fatalf("empty job %+v", j)
	}
	if err := f.replayer(fake).Run(ctx, "job_nope"); err != nil {
		t.Fatal(err)
	}
}

func TestReplayerResumesAnInterruptedJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ep := f.endpoint()
	ids := f.deadLetters(ep, "order.created", 5)
	id := f.job(storage.DeadLetterFilter{EndpointID: ep})

	// The run is stopped (a worker shutting down) as it starts the third.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := &attempts{fail: map[string]error{ids[0]: nil}, before: func(ctx context.Context, n int) error {
		if n == 2 {
			cancel()
			return ctx.Err()
		}
		return nil
	}}
	if err := f.replayer(fake).Run(ctx, id); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run returned %v", err)
	}
	j := f.getJob(id)
	if j.Status != webhookd.JobRunning || j.Total != 5 || j.Done != 2 || j.FailedCount != 1 || j.FinishedAt != nil {
		t.Fatalf("interrupted job %+v", j)
	}

	// Dead letters that appear meanwhile are outside the job's scope.
	late := f.deadLetters(ep, "order.created", 1)

	fake.before = nil
	if err := f.replayer(fake).Run(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fake.calls, ids) {
		t.Fatalf("attempted %v, want each of %v once (not %v)", fake.calls, ids, late)
	}
	j = f.getJob(id)
	if j.Status != webhookd.JobSucceeded || j.Total != 5 || j.Done != 5 || j.FailedCount != 1 || j.FinishedAt == nil {
		t.Fatalf("resumed job %+v", j)
	}
}

func TestReplayerStopsACanceledJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ep := f.endpoint()
	ids := f.deadLetters(ep, "order.created", 5)
	id := f.job(storage.DeadLetterFilter{EndpointID: ep})
	fake := &attempts{before: func(ctx context.Context, n int) error {
		if n == 2 {
			if j, err := f.db.Store().CancelJob(ctx, f.project, id, time.Now()); err != nil || j.Status != webhookd.JobCanceled {
				t.Errorf("cancel: %+v, %v", j, err)
			}
		}
		return nil
	}}
	if err := f.replayer(fake).Run(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fake.calls, ids[:3]) {
		t.Fatalf("attempted %v after a cancel during the third of %v", fake.calls, ids)
	}
	if j := f.getJob(id); j.Status != webhookd.JobCanceled || j.Done != 2 || j.FinishedAt == nil {
		t.Fatalf("canceled job %+v", j)
	}
	if err := f.replayer(fake).Run(context.Background(), id); err != nil || len(fake.calls) != 3 {
		t.Fatalf("a canceled job ran again: %v, %v", err, fake.calls)
	}
}

func TestReplayerLeavesAJobAnotherRunHolds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	ep := f.endpoint()
	f.deadLetters(ep, "order.created", 2)
	id := f.job(storage.DeadLetterFilter{})

	held, err := f.db.Store().ClaimJob(ctx, id, time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fake := &attempts{}
	if err := f.replayer(fake).Run(ctx, id); !errors.Is(err, storage.ErrJobLeased) || len(fake.calls) != 0 {
		t.Fatalf("run beside a holder: %v, %d calls", err, len(fake.calls))
	}
	if err := f.db.Store().ReleaseJob(ctx, held); err != nil {
		t.Fatal(err)
	}
	if err := f.replayer(fake).Run(ctx, id); err != nil || len(fake.calls) != 2 {
		t.Fatalf("run after release: %v, %d calls", err, len(fake.calls))
	}
	// The old holder lost the job: it can record nothing more.
	held.Done = 1
	if err := f.db.Store().UpdateJobProgress(ctx, held, time.Now()); !errors.Is(err, storage.ErrJobLeased) {
		t.Fatalf("stale holder's progress: %v", err)
	}
	if j := f.getJob(id); j.Status != webhookd.JobSucceeded || j.Done != 2 {
		t.Fatalf("job %+v", j)
	}
}

func TestReplayerFailsAJobThatCannotRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.deadLetters(f.endpoint(), "order.created", 1)
	id := f.job(storage.DeadLetterFilter{})
	if _, err := f.db.Pool().Exec(ctx, `UPDATE jobs SET params = '{"endpoint_ids":["ep_x"]}' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	fake := &attempts{}
	if err := f.replayer(fake).Run(ctx, id); err != nil {
		t.Fatal(err)
	}
	var errText string
	if err := f.db.Pool().QueryRow(ctx, `SELECT error FROM jobs WHERE id = $1`, id).Scan(&errText); err != nil {
		t.Fatal(err)
	}
	if j := f.getJob(id); j.Status != webhookd.JobFailed || j.FinishedAt == nil || len(fake.calls) != 0 || errText == "" {
		t.Fatalf("job %+v error %q, %d calls", j, errText, len(fake.calls))
	}
}

func TestRunnableJobs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	queued, running, done := f.job(storage.DeadLetterFilter{}), f.job(storage.DeadLetterFilter{}), f.job(storage.DeadLetterFilter{})
	if _, err := f.db.Store().ClaimJob(ctx, running, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := f.replayer(&attempts{}).Run(ctx, done); err != nil {
		t.Fatal(err)
	}
	got, err := f.db.Store().RunnableJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{queued, running}) {
		t.Fatalf("runnable %v, want %v", got, []string{queued, running})
	}
}
