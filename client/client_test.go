package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/internal/faultproxy"
	"github.com/webhookd/webhookd/storage"
)

// newClient is a client of s through its proxy.
func newClient(t *testing.T, s *stack, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(s.proxy.URL, s.key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fast retries quickly when no Retry-After says otherwise.
var fast = client.WithRetryPolicy(client.RetryPolicy{BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond})

func event(typ string) client.NewEvent {
	return client.NewEvent{Type: typ, Data: map[string]any{"amount": 42}}
}

func TestRetryAfterDroppedResponseCreatesOneEvent(t *testing.T) {
	t.Parallel()
	s := newStack(t, storage.ProjectPlan{})
	s.proxy.SetRule(func(n int, r *http.Request) faultproxy.Fault { return faultproxy.Fault{Drop: n == 1} })
	c := newClient(t, s, fast)

	ev, err := c.SendEvent(context.Background(), event("invoice.paid"))
	if err != nil {
		t.Fatalf("SendEvent: %v", err)
	}
	if n := s.count(t, "events"); n != 1 {
		t.Fatalf("%d events in the database after a dropped response and a retry, want 1", n)
	}
	got, err := c.Event(context.Background(), ev.ID)
	if err != nil || got.ID != ev.ID {
		t.Fatalf("Event(%s) = %+v, %v", ev.ID, got, err)
	}
	reqs := s.proxy.Requests()
	if len(reqs) < 2 || reqs[0].Path != "/v1/events" || reqs[1].Path != "/v1/events" {
		t.Fatalf("requests %+v, want the POST twice", reqs)
	}
	if reqs[0].IdempotencyKey == "" || reqs[1].IdempotencyKey != reqs[0].IdempotencyKey {
		t.Fatalf("Idempotency-Key %q then %q, want the same key on the retry", reqs[0].IdempotencyKey, reqs[1].IdempotencyKey)
	}
	if !reqs[1].Replayed {
		t.Fatalf("the retry was not answered from the idempotency record: %+v", reqs[1])
	}
}

func TestKeyIsFreshPerOperationAndCallerKeyIsUsed(t *testing.T) {
	t.Parallel()
	s := newStack(t, storage.ProjectPlan{})
	c := newClient(t, s, fast)
	ctx := context.Background()
	a, err := c.SendEvent(ctx, event("a.b"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.SendEvent(ctx, event("a.b"))
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == b.ID {
		t.Fatalf("two operations with the same body made one event %s", a.ID)
	}
	mine, err := c.SendEvent(ctx, event("a.b"), client.WithIdempotencyKey("order-7-paid"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.SendEvent(ctx, event("a.b"), client.WithIdempotencyKey("order-7-paid"))
	if err != nil || again.ID != mine.ID {
		t.Fatalf("the same caller key twice: %v, %v; want the first event %s", again, err, mine.ID)
	}
	reqs := s.proxy.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	if reqs[0].IdempotencyKey == reqs[1].IdempotencyKey || len(reqs[0].IdempotencyKey) != 36 {
		t.Fatalf("keys %q and %q: want two different UUIDs", reqs[0].IdempotencyKey, reqs[1].IdempotencyKey)
	}
	if reqs[2].IdempotencyKey != "order-7-paid" || !reqs[3].Replayed {
		t.Fatalf("caller key requests %+v %+v", reqs[2], reqs[3])
	}
	_, err = c.SendEvent(ctx, event("other.type"), client.WithIdempotencyKey("order-7-paid"))
	if !errors.Is(err, client.ErrIdempotencyKeyMismatch) {
		t.Fatalf("a reused key with another body: %v, want ErrIdempotencyKeyMismatch", err)
	}
}

func TestRetryAfterIsObeyed(t *testing.T) {
	t.Parallel()
	s := newStack(t, storage.ProjectPlan{})
	s.proxy.SetRule(func(n int, r *http.Request) faultproxy.Fault {
		switch n {
		case 1:
			return faultproxy.Fault{Status: http.StatusServiceUnavailable, RetryAfter: "1"}
		case 2:
			return faultproxy.Fault{Status: http.StatusTooManyRequests, RetryAfter: "1"}
		}
		return faultproxy.Fault{}
	})
	c := newClient(t, s, fast)
	if _, err := c.SendEvent(context.Background(), event("x.y")); err != nil {
		t.Fatal(err)
	}
	reqs := s.proxy.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3 (503, 429, then the API)", len(reqs))
	}
	for i := 1; i < 3; i++ {
		if gap := reqs[i].At.Sub(reqs[i-1].At); gap < time.Second {
			t.Errorf("try %d came %v after a Retry-After: 1, want at least 1s", i+1, gap)
		}
	}
	if reqs[2].Status != http.StatusAccepted || s.count(t, "events") != 1 {
		t.Fatalf("last try %+v, %d events", reqs[2], s.count(t, "events"))
	}
}

func TestServerErrorsAreRetriedThenGivenUpWithTheLastAnswer(t *testing.T) {
	t.Parallel()
	s := newStack(t, storage.ProjectPlan{})
	s.proxy.SetRule(func(n int, r *http.Request) faultproxy.Fault {
		return faultproxy.Fault{Status: []int{500, 502, 504, 503}[(n-1)%4], RetryAfter: "0"}
	})
	c := newClient(t, s, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}))
	_, err := c.SendEvent(context.Background(), event("x.y"))
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("err %v, want an *Error", err)
	}
	if e.StatusCode != 503 || e.Attempts != 4 || e.RequestID != "req_proxy4" || e.Header.Get("Retry-After") != "0" {
		t.Fatalf("error %+v, want the last answer (503, 4 tries, req_proxy4)", e)
	}
	if n := len(s.proxy.Requests()); n != 4 {
		t.Fatalf("%d requests, want MaxAttempts = 4", n)
	}
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	t.Parallel()
	s := newStack(t, storage.ProjectPlan{})
	c := newClient(t, s, fast)
	ctx := context.Background()

	_, err := c.SendEvent(ctx, client.NewEvent{Type: "bad type!", Data: 1})
	var e *client.Error
	if !errors.As(err, &e) || !errors.Is(err, client.ErrValidationFailed) {
		t.Fatalf("err %v, want validation_failed", err)
	}
	if e.StatusCode != 400 || e.Field != "type" || !strings.HasPrefix(e.RequestID, "req_") || e.Attempts != 1 {
		t.Fatalf("error %+v", e)
	}
	if _, err := c.Event(ctx, "evt_nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Event(evt_nope): %v, want ErrNotFound", err)
	}
	x := "order-1"
	first, err := c.SendEvent(ctx, client.NewEvent{Type: "a", Data: 1, ExternalID: x})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SendEvent(ctx, client.NewEvent{Type: "a", Data: 1, ExternalID: x})
	if !errors.As(err, &e) || !errors.Is(err, client.ErrExternalIDTaken) || e.ExistingID != first.ID {
		t.Fatalf("err %v, want external_id_taken naming %s", err, first.ID)
	}
	bad, err := client.New(s.proxy.URL, "wrong-key", fast)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.SendEvent(ctx, event("a")); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("wrong key: %v, want ErrUnauthorized", err)
	}
	if n := len(s.proxy.Requests()); n != 5 {
		t.Fatalf("%d requests for 5 calls that each got a 4xx, want 5 (no retries)", n)
	}
}

func TestCancelledContextStopsRetriesAtOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, storage.ProjectPlan{})
	s.proxy.SetRule(func(n int, r *http.Request) faultproxy.Fault {
		return faultproxy.Fault{Status: http.StatusServiceUnavailable, RetryAfter: "30"}
	})
	// The context is cancelled once the client has read the first answer
	// (its body closed), while it waits out the Retry-After: cancelling as
	// soon as the proxy saw the request could beat the answer to the client.
	ctx, cancel := context.WithCancel(context.Background())
	c := newClient(t, s, client.WithHTTPClient(&http.Client{Transport: cancelAfterAnswer{http.DefaultTransport, cancel}}))
	start := time.Now()
	_, err := c.SendEvent(ctx, event("x.y"))
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the call returned %v after its context was cancelled, want at once", took)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	var e *client.Error
	if !errors.As(err, &e) || e.StatusCode != 503 {
		t.Fatalf("err %v does not carry the last answer (503)", err)
	}
	if n := len(s.proxy.Requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

func TestDeadlineTooShortForRetryAfterGivesUpAtOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, storage.ProjectPlan{})
	s.proxy.SetRule(func(n int, r *http.Request) faultproxy.Fault {
		return faultproxy.Fault{Status: http.StatusTooManyRequests, RetryAfter: "20"}
	})
	c := newClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.SendEvent(ctx, event("x.y"))
	if took := time.Since(start); took > time.Second {
		t.Fatalf("waited %v for a Retry-After past the deadline", took)
	}
	if !errors.Is(err, client.ErrRateLimited) && !strings.Contains(err.Error(), "429") {
		t.Fatalf("err %v, want the 429", err)
	}
}

// TestPacingStaysUnderTheLimit sends a tenth more requests than a
// project's per-minute limit through one client from three goroutines: the
// first ones spend the limit's burst, and the client's pacing must then
// keep the rest under the limit, so the API never answers 429. The limit is
// high so that the paced part, a tenth of a second a request, is over in
// seconds; a small limit proves the same over minutes.
func TestPacingStaysUnderTheLimit(t *testing.T) {
	t.Parallel()
	const (
		limit      = 600 // a minute: GCRA wins one back every 100 ms, and allows a burst of all of them
		goroutines = 3
		each       = (limit + limit/10) / goroutines
	)
	s := newStack(t, storage.ProjectPlan{RateLimitPerMinute: limit})
	c := newClient(t, s, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range each {
				if _, err := c.SendEvent(ctx, event("paced")); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("SendEvent: %v", err)
	}
	var n429 int
	for _, r := range s.proxy.Requests() {
		if r.Status == http.StatusTooManyRequests {
			n429++
		}
	}
	if n429 > 0 || s.count(t, "events") != goroutines*each {
		t.Fatalf("%d answers were 429; %d events, want %d", n429, s.count(t, "events"), goroutines*each)
	}
}

// cancelAfterAnswer calls cancel when the body of an answer is closed.
type cancelAfterAnswer struct {
	next   http.RoundTripper
	cancel context.CancelFunc
}

func (c cancelAfterAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		resp.Body = cancelOnClose{resp.Body, c.cancel}
	}
	return resp, err
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
