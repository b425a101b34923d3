package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/tracing"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
	"github.com/webhookd/webhookd/wire"
)

// Deliverer makes attempts: the one code path for first attempts, retries,
// test events, manual redeliveries and replays.
//
// An attempt leases its delivery (storage.ClaimDeliveries), sends the
// request with no PostgreSQL connection held, then records the attempt and
// the new state (storage.RecordAttempts), which applies only while the
// lease is still its own. Claims and records of concurrent attempts travel
// together (group commit), so the pool stays small however many attempts
// are in flight.
type Deliverer struct {
	db       *storage.DB
	sender   wire.Sender
	schedule Schedule
	clock    webhookd.Clock
	log      *slog.Logger
	limiter  *redis_rate.Limiter // per-endpoint rate_limit_per_second
	prefix   string
	metrics  *metrics
	// attemptTimeout bounds one request, every phase of it; lease is how
	// long a claim holds a delivery, above attemptTimeout.
	attemptTimeout time.Duration
	lease          time.Duration
	claims         *batcher[storage.Claim, storage.Lease]
	records        *batcher[storage.Record, bool]
	circuits       *batcher[storage.CircuitOutcome, []storage.CircuitChange]
	releases       *batcher[storage.Release, bool]
	gate           *gate
	holder         *holder
	worker         string    // this process's id: its heartbeat's, and its leases'
	alive          *liveness // when its heartbeat last landed
	circuit        storage.CircuitConfig
	tracer         *tracing.Tracer   // nil: tracing off
	relays         Relays            // nil: no relay has a listener
	transforms     *transform.Engine // runs endpoints' transformations
}

// Relays tells whether a relay endpoint (relay://NAME of a project) has a
// `webhookd listen` connected: package relay's Hub.
type Relays interface {
	Listening(ctx context.Context, project, name string) (bool, error)
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

// ErrEndpointDisabled says a manual attempt or replay was not made because
// the delivery's endpoint is disabled or deleted.
var ErrEndpointDisabled = errors.New("endpoint is disabled")

// Result is what one attempt did.
type Result struct {
	Attempted bool   // a request was sent and logged
	Status    string // the delivery's status afterwards
	Succeeded bool   // this attempt got a 2xx
	// Skipped: a replay found the delivery no longer a dead letter (another
	// replay or a redelivery got it through first).
	Skipped bool
	// HeldFor is the endpoint that had no room for the attempt, when it
	// was held back for that: a replay waits for it before trying again.
	HeldFor string
	// turn is the ordered endpoint whose queue this attempt moved on (its
	// delivery left the queue): the next delivery's turn has come.
	turn string
}

// Request names the attempt to make.
type Request struct {
	DeliveryID string
	// EndpointID, when known, lets an attempt wait for room at its
	// endpoint before any database work.
	EndpointID string
	// Manual is a redelivery by hand, made whatever the delivery's state;
	// else the attempt is the automatic one due now.
	Manual bool
	// Replay is a replay job's manual attempt: made only while the delivery
	// is still a dead letter.
	Replay bool
	// RequestID is the recorded redelivery request a manual attempt serves;
	// the attempt is skipped if it was served already.
	RequestID string
	By        string // who asked, for manual attempts and replays
	// chained: the next delivery of an ordered endpoint's queue, attempted
	// by the attempt before it (passTurn). Its claim and record go
	// straight to PostgreSQL: a queue's attempts are one at a time, so
	// there is nothing to gather them with, and a group's wait would be
	// paid on every one.
	chained bool
}

// kind is the kind of attempt asked for; a test event's is known only from
// its delivery (Deliverer.facts).
func (r Request) kind() Kind {
	switch {
	case r.Replay:
		return KindReplay
	case r.Manual:
		return KindManual
	}
	return KindAuto
}

// claimModes are the claims the kinds of Request make.
var claimModes = map[Kind]storage.ClaimMode{KindAuto: storage.ClaimAuto, KindManual: storage.ClaimManual,
	KindReplay: storage.ClaimReplay}

// Attempt makes one attempt of a delivery. It returns *RetryAt when the
// queue should come back later (the schedule, a Retry-After, an endpoint
// with no room, or another attempt holding the delivery).
//
// Whether the attempt is made is Decide's answer, from what the claim read
// in PostgreSQL. Every attempt that is made, automatic, test, manual or
// replay, takes a slot of its endpoint's in-flight cap, so that no kind of
// attempt can fill the worker's slots with one slow endpoint's requests.
// One that finds no room is held back without spending an attempt: a task
// in the holder, a manual one with its redelivery request still recorded;
// a replay, which waits in its job's goroutine and not in a worker slot,
// waits for room in the gate. An endpoint's transformation runs once the
// attempt has its slot, before the circuit's probe is taken and anything
// is signed (transformed): a cancel or a failure ends the attempt there.
func (d *Deliverer) Attempt(ctx context.Context, r Request) (Result, error) {
	res, err := d.attempt(ctx, r)
	if res.turn != "" {
		d.passTurn(ctx, res.turn)
	}
	return res, err
}

func (d *Deliverer) attempt(ctx context.Context, r Request) (Result, error) {
	auto := r.kind() == KindAuto
	rateChecked := false
	// The endpoint's cap counts requests in flight: a slot is held from
	// acquire until the response is in.
	var slot endpointSlot
	defer slot.release()
	admitted := false
	defer func() {
		if admitted { // never got to acquire
			d.gate.unadmit(r.EndpointID)
		}
	}()
	switch {
	case r.EndpointID == "":
	case r.Replay:
		if !d.gate.acquire(ctx, r.EndpointID, false) {
			return Result{}, ctx.Err()
		}
		slot = endpointSlot{gate: d.gate, ep: r.EndpointID}
	default:
		if !d.gate.admit(r.EndpointID) {
			return Result{}, d.holder.hold(ctx, r.EndpointID, r.DeliveryID, webhookd.WaitingEndpointBusy)
		}
		admitted = true
		if rate := d.gate.rate(r.EndpointID); rate > 0 && auto { // known from an earlier claim: no database work if held back
			rateChecked = true
			if _, ok := d.allowed(ctx, r.EndpointID, rate); !ok {
				return Result{}, d.holder.hold(ctx, r.EndpointID, r.DeliveryID, webhookd.WaitingRateLimit)
			}
		}
	}
	l, err := d.claim(ctx, r, storage.Claim{DeliveryID: r.DeliveryID, Token: storage.NewRequestID(), Mode: claimModes[r.kind()],
		RequestID: r.RequestID, Worker: d.worker})
	if err != nil {
		return Result{}, err
	}
	now := l.Now
	if l.Found {
		d.gate.learn(l.Delivery.EndpointID, l.MaxInFlight, l.Endpoint.RateLimitPerSecond)
		d.gate.markCircuit(l.Delivery.EndpointID, l.Endpoint.Circuit != webhookd.CircuitClosed, now)
	}
	f := d.facts(r, &l, now)
	if f.Relay && f.Held {
		f.Listening = d.listening(ctx, &l)
	}
	act := Decide(f)
	del := l.Delivery
	switch act.Verdict {
	case Skip:
		return Result{Status: del.Status, Skipped: act.Skipped}, nil
	case Later:
		return Result{Status: del.Status}, &RetryAt{At: act.At, Reason: "not due, or another attempt holds it"}
	case Wait:
		return d.wait(ctx, r, &l, act)
	case DeadLetter:
		return d.finish(ctx, r, &l, nil, storage.Transition{Status: webhookd.DeliveryDeadLetter,
			DeadLetterReason: act.Reason, Now: now})
	case Refuse:
		t := storage.Transition{Status: del.Status, NextAttemptAt: del.NextAttemptAt, ManualDone: r.Manual && !r.Replay, Now: now}
		if _, err := d.record(ctx, storage.Record{Lease: &l, Transition: t}); err != nil {
			return Result{}, err
		}
		d.log.Info("manual attempt not made: the endpoint is disabled", "delivery_id", del.ID,
			"endpoint_id", del.EndpointID, "by", r.By)
		return Result{Status: del.Status}, ErrEndpointDisabled
	}
	probe := act.Verdict == Probe
	if d.leaseInDoubt() {
		// Its heartbeats have not landed for a while: another process may
		// have voided its leases and given this delivery to another attempt
		// (on an ordered endpoint, a second request in flight). Not sent,
		// and nothing spent on it: no rate token, no slot, no
		// transformation, and no probe (taken and not sent, the probe
		// would hold the endpoint's deliveries until its lease ran out).
		return d.holdLeased(ctx, r, &l, now, webhookd.WaitingEndpointBusy)
	}
	if auto && !rateChecked && l.Endpoint.RateLimitPerSecond != nil {
		if at, ok := d.allowed(ctx, del.EndpointID, *l.Endpoint.RateLimitPerSecond); !ok {
			return d.holdLeased(ctx, r, &l, at, webhookd.WaitingRateLimit)
		}
	}
	if slot.gate == nil {
		if !admitted && !d.gate.admit(del.EndpointID) { // a task that did not name its endpoint
			return d.holdLeased(ctx, r, &l, now, webhookd.WaitingEndpointBusy)
		}
		admitted = false // acquire ends the admission either way
		if !d.gate.acquire(ctx, del.EndpointID, true) {
			return d.holdLeased(ctx, r, &l, now, webhookd.WaitingEndpointBusy)
		}
		slot = endpointSlot{gate: d.gate, ep: del.EndpointID}
	}
	tr, res, err, goOn := d.transformed(ctx, r, &l, &slot)
	if !goOn {
		return res, err
	}
	if probe {
		if res, err, goOn := d.takeProbe(ctx, r, &l, &slot, now); !goOn {
			return res, err
		}
	}
	// The circuit may have opened while this attempt waited for its slot
	// (its claim read it closed; this process has since recorded the
	// failure that opened it): it waits for the probe too.
	if auto && !probe && d.circuit.After > 0 && d.gate.circuitOpen(del.EndpointID) {
		slot.release()
		return d.holdLeased(ctx, r, &l, d.circuitWait(&l, now), webhookd.WaitingCircuitOpen)
	}
	return d.send(ctx, r, &l, &slot, probe, tr)
}

// leaseInDoubt tells whether this worker's heartbeats stopped landing long
// enough ago for its leases to be voided soon (storage.WorkerStale, less
// a beat and a half for the request to start).
func (d *Deliverer) leaseInDoubt() bool {
	ago, ok := d.alive.since(time.Now())
	return ok && ago > storage.WorkerStale-3*heartbeatInterval/2
}

// send makes the request of a claimed delivery whose endpoint had room —
// as its endpoint's transformation made it, with tr — records it with the
// delivery's next state, and counts it for the endpoint's breaker.
func (d *Deliverer) send(ctx context.Context, r Request, l *storage.Lease, slot *endpointSlot, probe bool, tr *transform.Result) (Result, error) {
	auto, del := r.kind() == KindAuto, l.Delivery
	trigger := l.Trigger
	if !auto {
		trigger = webhookd.TriggerManual
	}
	// The request and its record do not depend on the task's context: an
	// attempt that was sent is always recorded, bounded by attemptTimeout.
	spanCtx, span := d.startAttempt(ctx, l, trigger)
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(spanCtx), d.attemptTimeout)
	slot.start = time.Now()
	a, resp := d.request(sendCtx, l, trigger, tr)
	cancel()
	a.TraceID, _ = tracing.IDs(spanCtx)
	if l.SecretErr == nil { // unsent: it says nothing of the endpoint
		slot.sig = signalOf(resp)
	}
	slot.release()
	end := d.clock.Now()
	out := Classify(end, l.AutoAttempts+1, d.schedule, resp)
	t := transition(del.Status, del.NextAttemptAt, r, out, end)
	endAttempt(span, a, resp, t.Status)
	res, err := d.finish(ctx, r, l, &a, t)
	if err != nil || !res.Attempted {
		return res, err
	}
	d.metrics.observe(a, t.Status)
	if l.SecretErr == nil {
		d.countForBreaker(ctx, l, slot.sig, end, probe)
	}
	d.log.InfoContext(spanCtx, "delivery attempt", "delivery_id", del.ID, "event_id", del.EventID, "endpoint_id", del.EndpointID,
		"attempt", a.Number, "trigger", trigger, "request_id", a.RequestID, "status_code", orNil(a.StatusCode),
		"error", orNil(a.Error), "duration_ms", a.DurationMS, "outcome", t.Status)
	res.Succeeded = out.Status == webhookd.DeliverySucceeded
	if auto && t.Status == webhookd.DeliveryRetrying {
		return res, &RetryAt{At: *t.NextAttemptAt, Reason: "retry on schedule"}
	}
	return res, nil
}

// finish records how a claimed delivery's attempt ended (a, or none) and
// the state it moves to, on every way an attempt ends: a delivery that
// left its ordered endpoint's queue passes the turn (Result.turn). The
// record writes the operational events of a dead letter or a 410 with it
// (storage.RecordAttempts).
func (d *Deliverer) finish(ctx context.Context, r Request, l *storage.Lease, a *webhookd.Attempt, t storage.Transition) (Result, error) {
	del := l.Delivery
	applied, err := d.record(ctx, storage.Record{Lease: l, Attempt: a, Transition: t})
	if err != nil {
		return Result{}, fmt.Errorf("record attempt of %s: %w", del.ID, err)
	}
	if !applied { // the lease ran out and another attempt took the delivery
		if a != nil {
			d.log.Warn("attempt not recorded: its lease ran out", "delivery_id", del.ID, "request_id", a.RequestID,
				"status_code", orNil(a.StatusCode), "duration_ms", a.DurationMS)
		}
		return Result{Attempted: a != nil, Status: del.Status}, nil
	}
	res := Result{Attempted: a != nil, Status: t.Status}
	if leftQueue(l, t) {
		res.turn = del.EndpointID
	}
	return res, nil
}

// wait carries out Decide's Wait: a delivery behind others in its ordered
// queue waits for its turn; a manual attempt of one is served by making it
// due at once (its turn brings the attempt); else the lease is given up
// and the delivery waits until the time decided.
func (d *Deliverer) wait(ctx context.Context, r Request, l *storage.Lease, act Action) (Result, error) {
	del := l.Delivery
	switch {
	case !l.Held: // only an automatic attempt waits unclaimed (Decide)
		return Result{Status: del.Status, HeldFor: del.EndpointID}, d.holder.waitTurn(ctx, r.DeliveryID)
	case act.Served:
		at := act.At
		t := storage.Transition{Status: del.Status, NextAttemptAt: &at, ManualDone: true, Waiting: webhookd.WaitingFIFOTurn, Now: act.At}
		if _, err := d.finish(ctx, r, l, nil, t); err != nil {
			return Result{}, err
		}
		d.log.Info("manual attempt waits for its turn in the ordered queue", "delivery_id", del.ID,
			"endpoint_id", del.EndpointID, "by", r.By)
		return Result{Status: del.Status}, nil
	}
	return d.holdLeased(ctx, r, l, act.At, act.Reason)
}

// endpointSlot is an attempt's slot of its endpoint, if it took one.
type endpointSlot struct {
	gate  *gate
	ep    string
	start time.Time // when its request started; zero: none was sent
	sig   signal    // what the request's outcome says of the endpoint
}

// release gives the slot back; later calls do nothing.
func (s *endpointSlot) release() {
	if s.gate != nil {
		took := time.Duration(-1)
		if !s.start.IsZero() {
			took = time.Since(s.start)
		}
		s.gate.release(s.ep, took, s.sig)
		s.gate = nil
	}
}

// holdLeased gives a lease up without an attempt and holds the attempt
// back for reason (a waiting reason). An automatic attempt's delivery
// records the wait in PostgreSQL in the same statement: until at for an
// open circuit, else until a freed slot wakes it (the holder). A person's
// attempt leaves the delivery's own schedule alone: a manual one looks
// again shortly, a replay waits in its caller.
func (d *Deliverer) holdLeased(ctx context.Context, r Request, l *storage.Lease, at time.Time, reason string) (Result, error) {
	ep := l.Delivery.EndpointID
	waits := ""
	if r.kind() == KindAuto {
		waits = reason
		if reason != webhookd.WaitingCircuitOpen {
			at = d.clock.Now().Add(holdFor)
		}
	}
	// With the releases of concurrent attempts that found no room either.
	held, err := d.releases.Do(context.WithoutCancel(ctx), storage.Release{DeliveryID: l.Delivery.ID, Token: l.Token,
		Reason: waits, At: at})
	if err != nil {
		return Result{}, err
	}
	res := Result{Status: l.Delivery.Status, HeldFor: ep}
	if !held { // its circuit closed meanwhile: due now
		return res, &RetryAt{At: d.clock.Now(), Reason: "its circuit closed"}
	}
	d.holder.held.WithLabelValues(reason).Inc()
	switch {
	case r.Replay: // no task to park: Replay waits for the endpoint's room
		return res, &RetryAt{At: at, Reason: "held back: " + reason}
	case r.Manual:
		// Its redelivery request stays recorded in PostgreSQL, and its
		// task looks again shortly: a person's attempts are few, not worth
		// a wait of their own.
		return res, &RetryAt{At: d.clock.Now().Add(manualLook), Reason: "held back: " + webhookd.WaitingEndpointBusy}
	case reason != webhookd.WaitingCircuitOpen:
		d.holder.remember(ep)
	}
	return res, &RetryAt{At: at, Reason: "held back: " + reason}
}

// manualLook is how soon a manual attempt that found no room looks again.
const manualLook = 500 * time.Millisecond

// record records an attempt, trying again for a while when PostgreSQL
// cannot be reached (a restart, a dropped connection): a request that was
// sent should not go unrecorded, nor leave its delivery leased until the
// lease runs out. It does not depend on ctx being alive.
func (d *Deliverer) record(ctx context.Context, r storage.Record) (bool, error) {
	ctx = context.WithoutCancel(ctx)
	var applied bool
	err := persist(func() (err error) {
		if r.Lease.FIFO { // one at a time: nothing to gather it with (Request.chained)
			var out []bool
			if out, err = d.recordAttempts(ctx, []storage.Record{r}); err == nil {
				applied = out[0]
			}
		} else {
			applied, err = d.records.Do(ctx, r)
		}
		if applied {
			d.metrics.recorded(r)
		}
		return err
	})
	return applied, err
}

// recordAttempts is storage.RecordAttempts, then enqueues the deliveries
// of the operational events the records wrote (dead_lettered,
// endpoint.disabled) once they have committed; one that misses the queue
// is the reconciler's.
func (d *Deliverer) recordAttempts(ctx context.Context, rs []storage.Record) ([]bool, error) {
	applied, ds, err := d.db.RecordAttempts(ctx, rs)
	_ = d.holder.queue.Enqueue(context.WithoutCancel(ctx), ds...)
	return applied, err
}

// persist runs a write that must land (an attempt's record, its breaker's
// count) until it succeeds, its batcher has stopped, or 8 tries (about
// 7 s) have failed: PostgreSQL restarting or a dropped connection should
// not lose it.
func persist(write func() error) error {
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		err := write()
		if err == nil || errors.Is(err, errBatcherStopped) || try == 8 {
			return err
		}
		time.Sleep(wait) // a backoff between tries of a write that must land, not a wait for a condition
		wait = min(2*wait, 2*time.Second)
	}
}

// Replay makes one manual attempt of a dead letter on behalf of by (a
// dead-letter replay job), waiting while another attempt holds it, and
// tells whether it got through: a 2xx, or the delivery is no longer a dead
// letter. A disabled endpoint returns ErrEndpointDisabled.
func (d *Deliverer) Replay(ctx context.Context, deliveryID, by string) (bool, error) {
	ep := "" // the endpoint, once it had no room: the next try waits for its room first
	for {
		res, err := d.Attempt(ctx, Request{DeliveryID: deliveryID, EndpointID: ep, Manual: true, Replay: true, By: by})
		var ra *RetryAt
		if !errors.As(err, &ra) {
			d.metrics.replayed(res.Succeeded || res.Skipped, err)
			return res.Succeeded || res.Skipped, err
		}
		ep = cmp.Or(res.HeldFor, ep)
		t := time.NewTimer(min(max(time.Until(ra.At), 50*time.Millisecond), time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

// transition decides the delivery's next state after r's attempt.
// Automatic attempts follow the outcome table. A manual attempt or replay
// never schedules anything: success makes the delivery succeeded (a dead
// letter is then marked replayed by r.By); failure leaves a dead letter
// dead and a succeeded delivery succeeded, and a waiting delivery keeps its
// schedule (next, the time of its automatic attempt, which its live task
// keeps too). A manual attempt's redelivery request is served either way.
func transition(prev string, next *time.Time, r Request, out Outcome, now time.Time) storage.Transition {
	k := r.kind()
	t := storage.Transition{Status: out.Status, DeadLetterReason: out.Reason, DisableEndpoint: out.DisableEndpoint, Now: now,
		Auto: k == KindAuto, ManualDone: k == KindManual}
	if out.Status == webhookd.DeliveryRetrying {
		next := out.NextAttemptAt
		t.NextAttemptAt = &next
	}
	if k == KindAuto {
		return t
	}
	t.DeadLetterReason = ""
	switch {
	case out.Status == webhookd.DeliverySucceeded:
		t.Status, t.NextAttemptAt = webhookd.DeliverySucceeded, nil
		if prev == webhookd.DeliveryDeadLetter {
			t.ReplayedBy = r.By
		}
	case prev == webhookd.DeliveryPending || prev == webhookd.DeliveryRetrying:
		t.Status, t.NextAttemptAt = webhookd.DeliveryRetrying, next // failed at least once now; the schedule stands
	default:
		t.Status, t.NextAttemptAt = prev, nil
	}
	return t
}

// allowed applies an endpoint's rate_limit_per_second; false means wait
// until the returned time (no attempt is spent). A limiter that cannot
// reach Redis lets the delivery through.
func (d *Deliverer) allowed(ctx context.Context, ep string, perSecond int) (time.Time, bool) {
	if d.limiter == nil {
		return time.Time{}, true
	}
	res, err := d.limiter.Allow(ctx, d.prefix+ep, redis_rate.PerSecond(perSecond))
	if err != nil || res.Allowed > 0 {
		return time.Time{}, true
	}
	return d.clock.Now().Add(max(res.RetryAfter, 100*time.Millisecond)), false
}

// request signs and sends one request and describes it as an attempt:
// the event's body, or tr's (its endpoint's transformation's: the body
// signed and sent, its URL and added headers).
func (d *Deliverer) request(ctx context.Context, l *storage.Lease, trigger string, tr *transform.Result) (webhookd.Attempt, wire.Response) {
	ep := l.Endpoint
	a := webhookd.Attempt{DeliveryID: l.Delivery.ID, Number: l.Delivery.AttemptsCount + 1, RequestID: l.Token,
		URL: ep.URL, Trigger: trigger, StartedAt: d.clock.Now()}
	if l.SecretErr != nil {
		// Nothing can be signed: the attempt fails unsent, and the delivery
		// follows its schedule as after any failure, to a dead letter if
		// the key does not come back.
		d.log.Warn("attempt not sent: its endpoint's secret cannot be decrypted", "delivery_id", l.Delivery.ID,
			"endpoint_id", l.Delivery.EndpointID, "err", l.SecretErr)
		return wire.Failed(a, l.SecretErr)
	}
	secrets := []string{ep.Secret}
	if ep.PreviousSecret != nil && ep.PreviousExpiresAt != nil && ep.PreviousExpiresAt.After(a.StartedAt) {
		secrets = append(secrets, *ep.PreviousSecret)
	}
	ctx = webhookd.WithProject(ctx, ep.ProjectID) // a relay is named within its project
	if tr != nil {
		a.URL = tr.URL
		return d.sender.SendBody(ctx, l.Event, tr.Body, tr.Headers, secrets, a)
	}
	return d.sender.Send(ctx, l.Event, secrets, a)
}

// orNil is what p points at, or nil, for a log line.
func orNil[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// deref is what p points at, or T's zero value.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
