package dispatcher

import (
	"context"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// Kind is the kind of attempt a task or a person asks for.
type Kind int

// Kinds of attempt.
const (
	KindAuto   Kind = iota // the automatic attempt due now: the first, or a retry on the schedule
	KindTest               // a test event's attempt: made at once, never held by the breaker
	KindManual             // a person's redelivery
	KindReplay             // a replay job's attempt of a dead letter
)

// person tells whether a person asked for the attempt: it is never held by
// the breaker (SPEC §3).
func (k Kind) person() bool { return k != KindAuto }

// Facts is what PostgreSQL said of a delivery and its endpoint when an
// attempt claimed it (storage.Lease), with PostgreSQL's time and the
// breaker's setting: everything Decide reads.
type Facts struct {
	Kind Kind
	Now  time.Time // PostgreSQL's, read by the claim
	// Found: the delivery exists (not purged). Held: the claim took its
	// lease; else OtherUntil is when another attempt's lease runs out.
	Found, Held   bool
	OtherUntil    *time.Time
	Status        string
	NextAttemptAt *time.Time
	CreatedAt     time.Time
	// ManualPending: the redelivery request a manual attempt serves is
	// still recorded on the delivery (not served, not replaced).
	ManualPending bool
	EndpointOff   bool // the endpoint is disabled or deleted
	Circuit       string
	ProbeAt       *time.Time // the next probe (open), or the probe's lease end (probing)
	// Breaker: the circuit breaker is on; FirstProbe is its first probe's
	// wait; Window is the schedule's whole window, after which a delivery
	// held by an open circuit becomes a dead letter.
	Breaker    bool
	FirstProbe time.Duration
	Window     time.Duration
	// FIFO: the delivery has a place in its ordered endpoint's queue;
	// Behind: a delivery ahead of it there is still waiting.
	FIFO, Behind bool
	// Relay: the endpoint is a relay (relay://NAME); Listening: a
	// `webhookd listen` is connected to it (read from Redis, a cache: wrong,
	// it only delays a delivery, which a listener's wake-up corrects).
	Relay, Listening bool
}

// Verdict is what an attempt does.
type Verdict int

// Verdicts.
const (
	// Skip: nothing to do (purged, done, a stale task, a request served).
	Skip Verdict = iota
	// Later: the claim did not get the delivery (another attempt holds it,
	// or it is not due yet): the task looks again at At, changing nothing.
	Later
	// Wait: the delivery waits until At for Reason (a waiting_reason),
	// without an attempt; its lease, if held, is given up.
	Wait
	// DeadLetter: the delivery becomes a dead letter with Reason, without
	// an attempt.
	DeadLetter
	// Refuse: a person's attempt at a disabled or deleted endpoint is not
	// made (ErrEndpointDisabled).
	Refuse
	// Send: make the request.
	Send
	// Probe: make the request as the probe of the endpoint's open circuit
	// (once the probe is taken in PostgreSQL: storage.TakeProbe).
	Probe
)

// Action is Decide's answer.
type Action struct {
	Verdict Verdict
	At      time.Time // Later, Wait
	Reason  string    // Wait: a waiting reason; DeadLetter: a dead-letter reason
	// Skipped (Skip of a replay): the delivery is no longer a dead letter,
	// another replay or a redelivery got it through first.
	Skipped bool
	// Served (Wait of a manual attempt): the redelivery request is served
	// by making the delivery due at once; its attempt comes with its turn.
	Served bool
}

// busyLook is how soon a task whose delivery another attempt holds looks
// again, at most: that attempt may fail and leave it due.
const busyLook = 5 * time.Second

// Decide is the one decision of the engine: from what PostgreSQL says of a
// delivery and its endpoint at PostgreSQL's now, whether an attempt of
// kind f.Kind is made now, waits (until when, and why), or ends the
// delivery as a dead letter. Every kind of attempt goes through it; the
// in-flight cap and rate limit of the endpoint in this process (caches of
// nothing, SPEC §1) are applied after it, to a Send or Probe.
func Decide(f Facts) Action {
	waiting := f.Status == webhookd.DeliveryPending || f.Status == webhookd.DeliveryRetrying
	switch {
	case !f.Found:
		return Action{Verdict: Skip}
	case !f.Held:
		return notHeld(f, waiting)
	case f.EndpointOff && f.Kind.person() && f.Kind != KindTest:
		return Action{Verdict: Refuse}
	case f.EndpointOff:
		return Action{Verdict: DeadLetter, Reason: webhookd.ReasonEndpointDisabled}
	case f.Relay && !f.Listening && !f.Kind.person():
		// Nobody listens: it waits, as behind an open circuit, without an
		// attempt, until a listener connects (which wakes it:
		// storage.WakeRelay) or its window ends. A person's attempt is
		// made, and fails at once for want of a listener.
		if end := f.CreatedAt.Add(f.Window); end.After(f.Now) {
			return Action{Verdict: Wait, At: end, Reason: webhookd.WaitingCircuitOpen}
		}
		return Action{Verdict: DeadLetter, Reason: webhookd.ReasonExhausted}
	case f.Kind == KindManual && f.FIFO && f.Behind && waiting:
		// A redelivery does not reorder an ordered queue: the delivery
		// is due at once, and goes when its turn comes.
		return Action{Verdict: Wait, At: f.Now, Reason: webhookd.WaitingFIFOTurn, Served: true}
	case f.Kind.person() || !f.Breaker || f.Circuit == webhookd.CircuitClosed:
		return Action{Verdict: Send}
	case f.ProbeAt == nil || !f.ProbeAt.After(f.Now):
		// The probe is due, or overdue because nobody could make it
		// (webhookd's own outage is no reason to give up a delivery).
		return Action{Verdict: Probe}
	case f.Circuit == webhookd.CircuitOpen && f.Now.Sub(f.CreatedAt) >= f.Window:
		// Its window has passed, on the endpoint's word: the last probe
		// (or the failures that opened the circuit) failed lately.
		return Action{Verdict: DeadLetter, Reason: webhookd.ReasonExhausted}
	}
	// The probe is not due: until the end of its window. The probe has a
	// wake-up of its own (Queue.EnqueueProbe), which makes one waiting
	// delivery due, and a probe that succeeds makes the others wait only
	// for room: so a backlog held by an open circuit is not woken at every
	// probe. Past its window while a probe is in flight, it looks again
	// after the first probe's wait (the probe may yet close the circuit).
	if end := f.CreatedAt.Add(f.Window); end.After(f.Now) {
		return Action{Verdict: Wait, At: end, Reason: webhookd.WaitingCircuitOpen}
	}
	return Action{Verdict: Wait, At: f.Now.Add(f.FirstProbe), Reason: webhookd.WaitingCircuitOpen}
}

// notHeld decides for a claim that did not get the delivery.
func notHeld(f Facts, waiting bool) Action {
	busy := Action{Verdict: Later, At: f.Now.Add(busyLook)}
	if f.OtherUntil != nil && f.OtherUntil.Before(busy.At) {
		busy.At = *f.OtherUntil
	}
	switch f.Kind {
	case KindAuto, KindTest:
		switch {
		case !waiting:
			return Action{Verdict: Skip} // PostgreSQL says it is done: a stale task
		case f.NextAttemptAt != nil && f.NextAttemptAt.After(f.Now):
			return Action{Verdict: Later, At: *f.NextAttemptAt}
		case f.Behind:
			return Action{Verdict: Wait, Reason: webhookd.WaitingFIFOTurn}
		}
	case KindManual:
		if !f.ManualPending {
			return Action{Verdict: Skip}
		}
	case KindReplay:
		if f.Status != webhookd.DeliveryDeadLetter {
			return Action{Verdict: Skip, Skipped: true}
		}
	}
	return busy
}

// facts reads what Decide needs from a claim's lease.
func (d *Deliverer) facts(r Request, l *storage.Lease, now time.Time) Facts {
	k := r.kind()
	if k == KindAuto && l.Trigger == webhookd.TriggerTest {
		k = KindTest
	}
	del, ep := &l.Delivery, &l.Endpoint
	_, relay := webhookd.RelayName(ep.URL)
	return Facts{Kind: k, Now: now, Found: l.Found, Held: l.Held, OtherUntil: l.OtherUntil, Status: del.Status,
		NextAttemptAt: del.NextAttemptAt, CreatedAt: del.CreatedAt,
		ManualPending: l.ManualRequest != nil && *l.ManualRequest == r.RequestID,
		EndpointOff:   l.EndpointDeleted || ep.Status != webhookd.EndpointActive,
		Circuit:       ep.Circuit, ProbeAt: ep.ProbeAt, Breaker: d.circuit.After > 0,
		FirstProbe: storage.ProbeWait(d.circuit.Probes, 0), Window: d.schedule.Window(), FIFO: l.FIFO, Behind: l.Behind,
		Relay: relay}
}

// listening tells whether a listener is connected to the relay endpoint
// of l (Facts.Listening): never without Relays. Without an answer (Redis
// unreachable) it says yes: the attempt is then made and fails like a
// network error, on the schedule, rather than waiting for a wake-up that
// may not come.
func (d *Deliverer) listening(ctx context.Context, l *storage.Lease) bool {
	if d.relays == nil {
		return false
	}
	name, _ := webhookd.RelayName(l.Endpoint.URL)
	ok, err := d.relays.Listening(ctx, l.Endpoint.ProjectID, name)
	return ok || err != nil
}
