package client_test

import (
	"context"
	"errors"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/bulk"
	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/storage"
)

func TestBulkStreamsEventsAndWaitJobFollowsTheJob(t *testing.T) {
	t.Parallel()
	s := newStack(t, storage.ProjectPlan{})
	c, err := client.New(s.api.URL, s.key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 2500
	var events iter.Seq[client.NewEvent] = func(yield func(client.NewEvent) bool) {
		for i := 1; i <= n; i++ {
			typ := "bulk.item"
			if i == 777 {
				typ = "bad type" // refused: not a valid type
			}
			if !yield(client.NewEvent{Type: typ, Data: map[string]int{"n": i}}) {
				return
			}
		}
	}
	id, err := c.Bulk(ctx, events)
	if err != nil || !strings.HasPrefix(id, "job_") {
		t.Fatalf("Bulk: %q, %v", id, err)
	}

	runner := &bulk.Runner{DB: s.db, Check: api.NewLineChecker(s.db, 0).Check}
	ran := make(chan error, 1)
	go func() { ran <- runner.Run(ctx, id) }()
	var (
		mu       sync.Mutex
		progress []client.Job
	)
	j, err := c.WaitJob(ctx, id, 10*time.Millisecond, func(j client.Job) {
		mu.Lock()
		progress = append(progress, j)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if j.Status != "succeeded" || j.Total != n || j.Done != n-1 || j.FailedCount != 1 {
		t.Fatalf("WaitJob: %+v", j)
	}
	mu.Lock()
	last := progress[len(progress)-1]
	for i := 1; i < len(progress); i++ {
		if progress[i].Done < progress[i-1].Done {
			t.Fatalf("progress went back: %+v", progress)
		}
	}
	mu.Unlock()
	if last != *j {
		t.Fatalf("the last progress call %+v is not the finished job %+v", last, j)
	}
	errs, err := c.JobErrors(ctx, id)
	if err != nil || len(errs) != 1 || errs[0].Line != 777 || errs[0].Code != "validation_failed" || errs[0].Field != "type" {
		t.Fatalf("JobErrors: %+v, %v", errs, err)
	}
	if j, err := c.CancelJob(ctx, id); err != nil || j.Status != "succeeded" {
		t.Fatalf("CancelJob of a finished job: %+v, %v", j, err)
	}

	_, err = c.BulkNDJSON(ctx, strings.NewReader(`{"type":"a","data":1}`+"\n{\n"))
	var apiErr *client.Error
	if !errors.Is(err, client.ErrInvalidJSON) || !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, "line 2") {
		t.Fatalf("a body with a line that is not JSON: %v", err)
	}
}
