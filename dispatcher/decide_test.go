package dispatcher

import (
	"testing"
	"time"

	"github.com/webhookd/webhookd"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	window := 25 * time.Hour
	// base is an automatic attempt that holds a pending delivery, accepted
	// a minute ago, of an active endpoint whose circuit is closed.
	base := Facts{Kind: KindAuto, Now: now, Found: true, Held: true, Status: webhookd.DeliveryPending,
		NextAttemptAt: at(0), CreatedAt: now.Add(-time.Minute), Circuit: webhookd.CircuitClosed,
		Breaker: true, FirstProbe: 30 * time.Second, Window: window}
	with := func(f func(*Facts)) Facts { c := base; f(&c); return c }
	open := func(probe time.Duration) func(*Facts) {
		return func(f *Facts) { f.Circuit, f.ProbeAt = webhookd.CircuitOpen, at(probe) }
	}
	send, probe := Action{Verdict: Send}, Action{Verdict: Probe}
	wait := func(until time.Time, reason string) Action { return Action{Verdict: Wait, At: until, Reason: reason} }
	dead := func(reason string) Action { return Action{Verdict: DeadLetter, Reason: reason} }

	tests := []struct {
		name string
		f    Facts
		want Action
	}{
		{"purged", with(func(f *Facts) { f.Found = false }), Action{Verdict: Skip}},
		{"due and held: send", base, send},

		// Not held by this claim.
		{"stale task of a succeeded delivery", with(func(f *Facts) { f.Held, f.Status, f.NextAttemptAt = false, webhookd.DeliverySucceeded, nil }),
			Action{Verdict: Skip}},
		{"stale task of a dead letter", with(func(f *Facts) { f.Held, f.Status = false, webhookd.DeliveryDeadLetter }), Action{Verdict: Skip}},
		{"not due yet: back at its time", with(func(f *Facts) { f.Held, f.NextAttemptAt = false, at(time.Minute) }),
			Action{Verdict: Later, At: now.Add(time.Minute)}},
		{"another attempt holds it: look again in 5 s", with(func(f *Facts) { f.Held, f.OtherUntil = false, at(time.Minute) }),
			Action{Verdict: Later, At: now.Add(busyLook)}},
		{"another attempt holds it for 2 s", with(func(f *Facts) { f.Held, f.OtherUntil = false, at(2*time.Second) }),
			Action{Verdict: Later, At: now.Add(2 * time.Second)}},
		{"ordered, behind others: waits its turn", with(func(f *Facts) { f.Held, f.FIFO, f.Behind = false, true, true }),
			Action{Verdict: Wait, Reason: webhookd.WaitingFIFOTurn}},
		{"manual request served or replaced", with(func(f *Facts) { f.Kind, f.Held = KindManual, false }), Action{Verdict: Skip}},
		{"manual request pending, delivery leased by another", with(func(f *Facts) { f.Kind, f.Held, f.ManualPending = KindManual, false, true }),
			Action{Verdict: Later, At: now.Add(busyLook)}},
		{"replay of a delivery no longer dead", with(func(f *Facts) { f.Kind, f.Held = KindReplay, false }),
			Action{Verdict: Skip, Skipped: true}},

		// The endpoint is disabled or deleted.
		{"automatic attempt, endpoint disabled", with(func(f *Facts) { f.EndpointOff = true }), dead(webhookd.ReasonEndpointDisabled)},
		{"test event, endpoint disabled", with(func(f *Facts) { f.Kind, f.EndpointOff = KindTest, true }), dead(webhookd.ReasonEndpointDisabled)},
		{"manual attempt, endpoint disabled", with(func(f *Facts) { f.Kind, f.EndpointOff = KindManual, true }), Action{Verdict: Refuse}},
		{"replay, endpoint disabled", with(func(f *Facts) { f.Kind, f.EndpointOff, f.Status = KindReplay, true, webhookd.DeliveryDeadLetter }),
			Action{Verdict: Refuse}},

		// The breaker.
		{"open circuit, probe ahead: wait until the window's end (the probe has its own wake-up)", with(open(20 * time.Second)),
			wait(now.Add(-time.Minute+window), webhookd.WaitingCircuitOpen)},
		{"open circuit, probe due: probe", with(open(0)), probe},
		{"open circuit, probe overdue: probe", with(open(-time.Hour)), probe},
		{"open circuit, window passed, probe ahead: dead letter", with(func(f *Facts) {
			open(time.Minute)(f)
			f.CreatedAt = now.Add(-window)
		}), dead(webhookd.ReasonExhausted)},
		{"open circuit, window passed, probe due: probe first", with(func(f *Facts) {
			open(0)(f)
			f.CreatedAt = now.Add(-window - time.Hour)
		}), probe},
		{"open circuit, window ends before the probe: wait until its end", with(func(f *Facts) {
			open(10 * time.Minute)(f)
			f.CreatedAt = now.Add(-window + time.Minute)
		}), wait(now.Add(time.Minute), webhookd.WaitingCircuitOpen)},
		{"probe in flight: wait until the window's end", with(func(f *Facts) {
			f.Circuit, f.ProbeAt = webhookd.CircuitProbing, at(time.Hour)
		}), wait(now.Add(-time.Minute+window), webhookd.WaitingCircuitOpen)},
		{"probe in flight, window passed: not dead (its probe may succeed)", with(func(f *Facts) {
			f.Circuit, f.ProbeAt, f.CreatedAt = webhookd.CircuitProbing, at(time.Hour), now.Add(-2*window)
		}), wait(now.Add(30*time.Second), webhookd.WaitingCircuitOpen)},
		{"breaker off: an open circuit holds nothing", with(func(f *Facts) { open(time.Minute)(f); f.Breaker = false }), send},
		{"manual attempt goes through an open circuit", with(func(f *Facts) { open(time.Minute)(f); f.Kind = KindManual }), send},
		{"replay goes through an open circuit", with(func(f *Facts) {
			open(time.Minute)(f)
			f.Kind, f.Status = KindReplay, webhookd.DeliveryDeadLetter
		}), send},
		{"test event goes through an open circuit", with(func(f *Facts) { open(time.Minute)(f); f.Kind = KindTest }), send},

		// Ordered endpoints.
		{"ordered head: send", with(func(f *Facts) { f.FIFO = true }), send},
		{"manual redelivery of a queued ordered delivery waits its turn", with(func(f *Facts) {
			f.Kind, f.FIFO, f.Behind, f.Status = KindManual, true, true, webhookd.DeliveryRetrying
		}), Action{Verdict: Wait, At: now, Reason: webhookd.WaitingFIFOTurn, Served: true}},
		{"manual redelivery of an ordered dead letter goes at once", with(func(f *Facts) {
			f.Kind, f.FIFO, f.Behind, f.Status = KindManual, true, true, webhookd.DeliveryDeadLetter
		}), send},
		{"ordered head with an open circuit waits for the probe", with(func(f *Facts) { f.FIFO = true; open(time.Minute)(f) }),
			wait(now.Add(-time.Minute+window), webhookd.WaitingCircuitOpen)},

		// Relay endpoints: without a listener, as behind an open circuit.
		{"relay with a listener: send", with(func(f *Facts) { f.Relay, f.Listening = true, true }), send},
		{"relay, nobody listening: wait until the window's end (a listener wakes it)", with(func(f *Facts) { f.Relay = true }),
			wait(now.Add(-time.Minute+window), webhookd.WaitingCircuitOpen)},
		{"relay, nobody listening, window passed: dead letter", with(func(f *Facts) { f.Relay, f.CreatedAt = true, now.Add(-window) }),
			dead(webhookd.ReasonExhausted)},
		{"relay, nobody listening, breaker off: waits all the same", with(func(f *Facts) { f.Relay, f.Breaker = true, false }),
			wait(now.Add(-time.Minute+window), webhookd.WaitingCircuitOpen)},
		{"relay, nobody listening, circuit open with its probe due: no probe spent", with(func(f *Facts) { f.Relay = true; open(0)(f) }),
			wait(now.Add(-time.Minute+window), webhookd.WaitingCircuitOpen)},
		{"relay, nobody listening, manual attempt: made (it fails for want of a listener)", with(func(f *Facts) {
			f.Relay, f.Kind = true, KindManual
		}), send},
		{"relay, nobody listening, test event: made", with(func(f *Facts) { f.Relay, f.Kind = true, KindTest }), send},
		{"relay, nobody listening, endpoint disabled: dead letter as any", with(func(f *Facts) { f.Relay, f.EndpointOff = true, true }),
			dead(webhookd.ReasonEndpointDisabled)},
		{"relay with a listener, circuit open: the probe as any", with(func(f *Facts) { f.Relay, f.Listening = true, true; open(0)(f) }), probe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Decide(tt.f); got != tt.want {
				t.Errorf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestLeaseInDoubtOnceHeartbeatsStop: a worker whose heartbeats stopped
// landing 3.5 s ago sends nothing more on its leases (other processes void
// them 5 s after its last beat); before its first beat lands nobody can.
func TestLeaseInDoubtOnceHeartbeatsStop(t *testing.T) {
	l := newLiveness()
	d := &Deliverer{alive: l}
	if d.leaseInDoubt() {
		t.Fatal("in doubt before any beat landed")
	}
	l.landed(time.Now().Add(-time.Second))
	if d.leaseInDoubt() {
		t.Fatal("in doubt a second after a beat landed")
	}
	l.landed(time.Now().Add(-4 * time.Second))
	if !d.leaseInDoubt() {
		t.Fatal("not in doubt 4 s after the last beat that landed")
	}
}
