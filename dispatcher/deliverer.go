package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-redis/redis_rate/v10"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// maxResponseBody is how much of a response body an attempt keeps.
const maxResponseBody = 8 << 10

// Deliverer makes attempts: the one code path for first attempts, retries,
// test events and manual redeliveries.
type Deliverer struct {
	db       *storage.DB
	client   *http.Client
	schedule Schedule
	clock    webhookd.Clock
	log      *slog.Logger
	limiter  *redis_rate.Limiter // per-endpoint rate_limit_per_second
	prefix   string
	metrics  *metrics
	// bodyTimeout bounds reading the response body after its headers.
	bodyTimeout time.Duration
}

// RetryAt asks the queue to run the task again at a time: the next
// scheduled attempt, or a held-back one. It is not a failure.
type RetryAt struct {
	At     time.Time
	Reason string
}

func (r *RetryAt) Error() string {
	return "next attempt at " + r.At.Format(time.RFC3339) + ": " + r.Reason
}

// Result is what one attempt did.
type Result struct {
	Attempted bool   // a request was sent and logged
	Status    string // the delivery's status afterwards
	Succeeded bool   // this attempt got a 2xx
}

// Request names the attempt to make.
type Request struct {
	DeliveryID string
	// Manual is a redelivery by hand (or by a replay job), made whatever
	// the delivery's state; else the attempt is the automatic one due now.
	Manual bool
	// RequestID is the recorded redelivery request a manual attempt
	// serves; the attempt is skipped if it was served already. Empty for
	// replay jobs, which need no request.
	RequestID string
	By        string // who asked, for manual attempts
}

// Attempt makes one attempt of a delivery. It returns *RetryAt when the
// queue should come back later (the schedule, a Retry-After, a held-back
// delivery, or another attempt holding it).
func (d *Deliverer) Attempt(ctx context.Context, r Request) (Result, error) {
	manual := r.Manual
	l, err := d.db.LockDelivery(ctx, r.DeliveryID, manual)
	switch {
	case errors.Is(err, storage.ErrLocked):
		return Result{}, &RetryAt{At: d.clock.Now().Add(time.Second), Reason: "another attempt holds the delivery"}
	case errors.Is(err, webhookd.ErrNotFound):
		return Result{}, nil // purged: nothing to do
	case err != nil:
		return Result{}, err
	}
	defer l.Release(ctx)
	del := l.Delivery
	now := d.clock.Now()

	if !manual {
		if del.Status == webhookd.DeliverySucceeded || del.Status == webhookd.DeliveryDeadLetter {
			return Result{Status: del.Status}, nil // PostgreSQL says it is done: a stale task
		}
		if del.NextAttemptAt != nil && del.NextAttemptAt.After(now) {
			return Result{Status: del.Status}, &RetryAt{At: *del.NextAttemptAt, Reason: "not due yet"}
		}
		if l.EndpointDeleted || l.Endpoint.Status != webhookd.EndpointActive {
			t := storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonEndpointDisabled, Now: now}
			if err := l.Finish(ctx, nil, t); err != nil {
				return Result{}, err
			}
			return Result{Status: t.Status}, nil
		}
		if at, ok := d.heldBack(ctx, l.Endpoint, now); !ok {
			return Result{Status: del.Status}, &RetryAt{At: at, Reason: "endpoint rate limit"}
		}
	} else if r.RequestID != "" && (l.ManualRequest == nil || *l.ManualRequest != r.RequestID) {
		return Result{Status: del.Status}, nil // served already, or replaced by a newer request
	} else if l.EndpointDeleted {
		return Result{Status: del.Status}, l.Finish(ctx, nil, storage.Transition{Status: del.Status,
			NextAttemptAt: del.NextAttemptAt, ManualDone: true, Now: now}) // nowhere to send it
	}

	trigger := l.Trigger
	if manual {
		trigger = webhookd.TriggerManual
	}
	a, resp := d.send(ctx, l, trigger)
	out := Classify(d.clock.Now(), a.Number, d.schedule, resp)
	t := transition(del.Status, manual, out, r.By, d.clock.Now())
	t.ManualDone = r.RequestID != "" && manual
	if err := l.Finish(ctx, &a, t); err != nil {
		return Result{}, err
	}
	d.metrics.observe(a, t.Status)
	d.log.Info("delivery attempt", "delivery_id", del.ID, "event_id", del.EventID, "endpoint_id", del.EndpointID,
		"attempt", a.Number, "trigger", trigger, "request_id", a.RequestID, "status_code", orNil(a.StatusCode),
		"error", orNil(a.Error), "duration_ms", a.DurationMS, "outcome", t.Status)
	res := Result{Attempted: true, Status: t.Status, Succeeded: out.Status == webhookd.DeliverySucceeded}
	if !manual && t.Status == webhookd.DeliveryRetrying {
		return res, &RetryAt{At: *t.NextAttemptAt, Reason: "retry on schedule"}
	}
	return res, nil
}

// Replay makes one manual attempt on behalf of by (a dead-letter replay job)
// and tells whether it got a 2xx.
func (d *Deliverer) Replay(ctx context.Context, deliveryID, by string) (bool, error) {
	res, err := d.Attempt(ctx, Request{DeliveryID: deliveryID, Manual: true, By: by})
	return res.Succeeded, err
}

// transition decides the delivery's next state. Automatic attempts follow
// the outcome table. A manual attempt never schedules anything: success
// makes the delivery succeeded (a dead letter is then marked replayed by
// by); failure leaves a dead letter dead and a succeeded delivery succeeded,
// and a waiting delivery keeps its schedule.
func transition(prev string, manual bool, out Outcome, by string, now time.Time) storage.Transition {
	t := storage.Transition{Status: out.Status, DeadLetterReason: out.Reason, DisableEndpoint: out.DisableEndpoint, Now: now}
	if out.Status == webhookd.DeliveryRetrying {
		next := out.NextAttemptAt
		t.NextAttemptAt = &next
	}
	if !manual {
		return t
	}
	t.DeadLetterReason = ""
	switch {
	case out.Status == webhookd.DeliverySucceeded:
		t.Status, t.NextAttemptAt = webhookd.DeliverySucceeded, nil
		if prev == webhookd.DeliveryDeadLetter {
			t.ReplayedBy = by
		}
	case prev == webhookd.DeliveryPending || prev == webhookd.DeliveryRetrying:
		t.Status, t.NextAttemptAt = webhookd.DeliveryRetrying, &now // due now: the schedule resumes
	default:
		t.Status, t.NextAttemptAt = prev, nil
	}
	return t
}

// heldBack applies the endpoint's rate_limit_per_second; false means wait
// until the returned time (no attempt is spent). A limiter that cannot reach
// Redis lets the delivery through.
func (d *Deliverer) heldBack(ctx context.Context, ep webhookd.Endpoint, now time.Time) (time.Time, bool) {
	if ep.RateLimitPerSecond == nil || d.limiter == nil {
		return time.Time{}, true
	}
	res, err := d.limiter.Allow(ctx, d.prefix+ep.ID, redis_rate.PerSecond(*ep.RateLimitPerSecond))
	if err != nil || res.Allowed > 0 {
		return time.Time{}, true
	}
	return now.Add(max(res.RetryAfter, 100*time.Millisecond)), false
}

// send signs and sends one request and describes it as an attempt.
func (d *Deliverer) send(ctx context.Context, l *storage.LockedDelivery, trigger string) (webhookd.Attempt, Response) {
	ev, ep := l.Event, l.Endpoint
	a := webhookd.Attempt{DeliveryID: l.Delivery.ID, Number: l.Delivery.AttemptsCount + 1, RequestID: storage.NewRequestID(),
		URL: ep.URL, Trigger: trigger, StartedAt: d.clock.Now(), RequestHeaders: map[string]string{}, ResponseHeaders: map[string]string{}}
	body, err := json.Marshal(struct {
		ID        string          `json:"id"`
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}{ev.ID, ev.Type, ev.CreatedAt.UTC().Format(time.RFC3339Nano), ev.Data})
	if err != nil {
		return d.failed(a, err)
	}
	secrets := []string{ep.Secret}
	if ep.PreviousSecret != nil && ep.PreviousExpiresAt != nil && ep.PreviousExpiresAt.After(a.StartedAt) {
		secrets = append(secrets, *ep.PreviousSecret)
	}
	sig, err := SignatureHeader(secrets, ev.ID, a.StartedAt, body)
	if err != nil {
		return d.failed(a, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		return d.failed(a, err)
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "webhookd/"+webhookd.Version)
	h.Set("webhook-id", ev.ID)
	h.Set("webhook-timestamp", strconv.FormatInt(a.StartedAt.Unix(), 10))
	h.Set("webhook-signature", sig)
	h.Set("X-Event-Id", ev.ID)
	h.Set("X-Event-Type", ev.Type)
	h.Set("X-Delivery-Attempt", strconv.Itoa(a.Number))
	h.Set("X-Request-Id", a.RequestID)
	for k := range h {
		a.RequestHeaders[k] = h.Get(k)
	}

	start := time.Now()
	resp, err := d.client.Do(req)
	if err != nil {
		a.DurationMS = time.Since(start).Milliseconds()
		return d.failed(a, err)
	}
	defer resp.Body.Close()
	a.StatusCode = &resp.StatusCode
	for k := range resp.Header {
		a.ResponseHeaders[k] = resp.Header.Get(k)
	}
	a.ResponseBody = d.readBody(resp)
	a.DurationMS = time.Since(start).Milliseconds()
	return a, Response{StatusCode: resp.StatusCode, Header: resp.Header}
}

// failed completes an attempt that got no response.
func (d *Deliverer) failed(a webhookd.Attempt, err error) (webhookd.Attempt, Response) {
	msg := DescribeError(err)
	a.Error = &msg
	return a, Response{Err: err}
}

// readBody keeps the first 8 KiB of the body as text PostgreSQL can store
// (valid UTF-8, no NUL), reading for at most bodyTimeout.
func (d *Deliverer) readBody(resp *http.Response) string {
	timer := time.AfterFunc(d.bodyTimeout, func() { resp.Body.Close() })
	defer timer.Stop()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	s := strings.ToValidUTF8(strings.ReplaceAll(string(raw), "\x00", ""), "\uFFFD")
	for len(s) > maxResponseBody { // replacement characters can grow it
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// orNil is what p points at, or nil, for a log line.
func orNil[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
