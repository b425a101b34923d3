package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/internal/conformance"
	"github.com/webhookd/webhookd/storage"
)

// TestConformance runs sdks/conformance/cases.json, the scenario the Node,
// Python and PHP SDKs run too (make test-sdks), with the Go client: each
// case in a project of its own, through a fault proxy of its own, checked
// by internal/conformance.
func TestConformance(t *testing.T) {
	t.Parallel()
	file, err := conformance.Load("../sdks/conformance/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	s := newStackJobs(t, storage.ProjectPlan{}, time.Duration(file.RateLimitWindowMS)*time.Millisecond,
		func(db *storage.DB) webhookd.Enqueuer {
			jobs := conformance.NewJobs(db)
			t.Cleanup(jobs.Close)
			return jobs
		})
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sess, err := conformance.NewSession(ctx, s.db, s.api.URL, c)
			if err != nil {
				t.Fatal(err)
			}
			out := runCase(t, sess)
			problems, err := sess.Finish(ctx, out)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
}

// runCase makes a case's calls with one Go client and reports what came
// back.
func runCase(t *testing.T, sess *conformance.Session) conformance.Outcome {
	r := sess.Case.Retry
	c, err := client.New(sess.ProxyURL, sess.APIKey, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: r.MaxAttempts,
		BaseDelay: time.Duration(r.BaseDelayMS) * time.Millisecond, MaxDelay: time.Duration(r.MaxDelayMS) * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var out conformance.Outcome
	for _, call := range sess.Case.Calls {
		n := max(call.Repeat, 1)
		results := make([]conformance.Result, n)
		next := make(chan int, n)
		for i := range n {
			next <- i
		}
		close(next)
		var wg sync.WaitGroup
		for range max(call.Concurrency, 1) {
			wg.Go(func() {
				for i := range next {
					results[i] = runCall(c, call)
				}
			})
		}
		wg.Wait()
		out.Results = append(out.Results, results...)
	}
	out.ElapsedMS = int(time.Since(start).Milliseconds())
	return out
}

func runCall(c *client.Client, call conformance.Call) conformance.Result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if call.CancelAfterMS > 0 {
		time.AfterFunc(time.Duration(call.CancelAfterMS)*time.Millisecond, cancel)
	}
	var ev *client.Event
	var err error
	switch call.Op {
	case "send_event":
		var opts []client.CallOption
		if call.IdempotencyKey != "" {
			opts = append(opts, client.WithIdempotencyKey(call.IdempotencyKey))
		}
		ev, err = c.SendEvent(ctx, client.NewEvent{Type: call.Type, Data: call.Data, ExternalID: call.ExternalID}, opts...)
	case "get_event":
		ev, err = c.Event(ctx, call.ID)
	case "send_bulk":
		return runBulk(ctx, c, call)
	default:
		err = errors.New("unknown op " + call.Op)
	}
	if err == nil {
		return conformance.Result{OK: true, ID: ev.ID}
	}
	re := &conformance.ResultError{Message: err.Error(), Cancelled: errors.Is(err, context.Canceled)}
	var e *client.Error
	if errors.As(err, &e) {
		re.Status, re.Code, re.Field, re.RequestID, re.Attempts = e.StatusCode, e.Code, e.Field, e.RequestID, e.Attempts
	}
	return conformance.Result{Error: re}
}

// runBulk streams a send_bulk call's events as one job, waits for it with
// a progress callback and lists its refused lines.
func runBulk(ctx context.Context, c *client.Client, call conformance.Call) conformance.Result {
	fail := func(err error) conformance.Result {
		re := &conformance.ResultError{Message: err.Error()}
		var e *client.Error
		if errors.As(err, &e) {
			re.Status, re.Code, re.Field, re.RequestID, re.Attempts = e.StatusCode, e.Code, e.Field, e.RequestID, e.Attempts
		}
		return conformance.Result{Error: re}
	}
	var bad error
	id, err := c.Bulk(ctx, func(yield func(client.NewEvent) bool) {
		for _, raw := range call.Events {
			var ev client.NewEvent
			if bad = json.Unmarshal(raw, &ev); bad != nil || !yield(ev) {
				return
			}
		}
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rj := &conformance.ResultJob{}
	j, err := c.WaitJob(ctx, id, 20*time.Millisecond, func(j client.Job) {
		rj.Progress = append(rj.Progress, conformance.JobProgress{Status: j.Status, Total: j.Total, Done: j.Done,
			FailedCount: j.FailedCount})
	})
	if err != nil {
		return fail(err)
	}
	rj.Status, rj.Total, rj.Done, rj.FailedCount = j.Status, j.Total, j.Done, j.FailedCount
	errs, err := c.JobErrors(ctx, id)
	if err != nil {
		return fail(err)
	}
	for _, e := range errs {
		rj.Errors = append(rj.Errors, conformance.JobLine{Line: e.Line, Code: e.Code, Field: e.Field})
	}
	return conformance.Result{OK: true, ID: id, Job: rj}
}
