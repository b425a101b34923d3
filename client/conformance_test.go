package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
	s := newStackWindow(t, storage.ProjectPlan{}, time.Duration(file.RateLimitWindowMS)*time.Millisecond)
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
