package dispatcher

import (
	"context"
	"slices"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// DefaultCircuit is the breaker's default setting (SPEC §3): open after 10
// consecutive failures, probes after 30 s, 1, 2, 5 and 10 min and every
// 10 min after, disable after 120 h without a success.
var DefaultCircuit = storage.CircuitConfig{After: 10,
	Probes:       []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute},
	DisableAfter: 120 * time.Hour}

// circuitWait is how long an automatic attempt held by its endpoint's
// circuit waits: Decide's wait, for a circuit this process learnt open
// after the claim read it closed.
func (d *Deliverer) circuitWait(l *storage.Lease, now time.Time) time.Time {
	at := now.Add(storage.ProbeWait(d.circuit.Probes, 0))
	f := d.facts(Request{}, l, now)
	f.Held, f.Circuit, f.ProbeAt = true, webhookd.CircuitOpen, &at
	return Decide(f).At
}

// takeProbe makes an attempt that has its endpoint's slot the probe of its
// open circuit, if nobody took the probe first; else it gives the slot
// back and waits for the next probe. Taken only with the slot, so that a
// probe never waits for one (a circuit probing with no probe in flight
// would wait out the probe's lease).
func (d *Deliverer) takeProbe(ctx context.Context, r Request, l *storage.Lease, slot *endpointSlot, now time.Time) (res Result, err error, goOn bool) {
	// Should the probe never be counted, another may go once this one's
	// request and record are surely over (not a whole lease later: the
	// endpoint's deliveries wait for it); a probe whose worker dies is
	// freed sooner, with the worker's leases (storage.VoidDeadLeases).
	took, err := d.db.TakeProbe(ctx, l.Delivery.EndpointID, now, now.Add(d.attemptTimeout+10*time.Second), d.worker)
	if err == nil && took {
		d.metrics.probes.Inc()
		return Result{}, nil, true
	}
	slot.release()
	if err != nil {
		return Result{}, err, false
	}
	res, err = d.holdLeased(ctx, r, l, d.circuitWait(l, now), webhookd.WaitingCircuitOpen)
	return res, err, false
}

// countForBreaker applies a recorded attempt to its endpoint's breaker in
// PostgreSQL, the one place it is counted, when it can change it (any
// failure; a success while failures are counted or the circuit is not
// closed), and tells of what changed: operational events, a log line, and,
// once closed, the held deliveries made due and woken at once. probe: the
// attempt took the circuit's probe, so its failure moves the next probe
// along (the failures of attempts already in flight do not). sig is what
// its response said: a 2xx counts as ok, a 5xx, a timeout or a connect
// error as failed, and a 3xx or 4xx (429 too: the receiver is there) not
// at all. The outcomes of concurrent attempts are counted together, in
// one transaction (applyCircuits): an endpoint failing under load would
// otherwise queue one transaction per failure on its row's lock.
func (d *Deliverer) countForBreaker(ctx context.Context, l *storage.Lease, sig signal, at time.Time, probe bool) {
	ok := sig == signalOK
	counts := ok || sig == signalServerError || sig == signalTimeout
	if !counts || d.circuit.After <= 0 && d.circuit.DisableAfter <= 0 ||
		ok && l.Failures == 0 && l.Endpoint.Circuit == webhookd.CircuitClosed {
		return
	}
	// Lost, a probe's success would leave the circuit probing, and the
	// endpoint's deliveries waiting, until the probe's time ran out.
	var changes []storage.CircuitChange
	err := persist(func() (err error) {
		changes, err = d.circuits.Do(context.WithoutCancel(ctx),
			storage.CircuitOutcome{EndpointID: l.Delivery.EndpointID, OK: ok, At: at, Probe: probe})
		return err
	})
	if err != nil {
		d.log.Warn("circuit breaker not updated", "endpoint_id", l.Delivery.EndpointID, "err", err)
		return
	}
	for _, c := range changes {
		d.gate.markCircuit(c.EndpointID, c.To != webhookd.CircuitClosed, at)
		d.circuitChanged(ctx, c)
	}
}

// applyCircuits is the flush of the breaker's outcomes: storage.ApplyCircuit
// over all of them, each change handed to the outcome that was its
// endpoint's last, so that exactly one caller tells of it.
func (d *Deliverer) applyCircuits(ctx context.Context, outs []storage.CircuitOutcome) ([][]storage.CircuitChange, error) {
	changes, err := d.db.ApplyCircuit(ctx, d.circuit, outs)
	if err != nil {
		return nil, err
	}
	out := make([][]storage.CircuitChange, len(outs))
	for _, c := range changes {
		for i, o := range slices.Backward(outs) {
			if o.EndpointID == c.EndpointID {
				out[i] = append(out[i], c)
				break
			}
		}
	}
	return out, nil
}

func (d *Deliverer) circuitChanged(ctx context.Context, c storage.CircuitChange) {
	// ApplyCircuit wrote the change's operational events with it (if any);
	// a delivery of theirs that misses the queue is the reconciler's.
	_ = d.holder.queue.Enqueue(context.WithoutCancel(ctx), c.Deliveries...)
	switch {
	case c.To == webhookd.CircuitClosed && c.From != webhookd.CircuitClosed:
		d.log.Info("endpoint circuit closed", "endpoint_id", c.EndpointID)
		d.metrics.circuits.WithLabelValues("closed").Inc()
		// ApplyCircuit made the deliveries that waited for the probe wait
		// for room instead: as many go now as the endpoint has room for,
		// and each slot that frees wakes the next.
		d.holder.remember(c.EndpointID)
		d.holder.wake(context.WithoutCancel(ctx), c.EndpointID)
	case c.To == webhookd.CircuitOpen && c.From == webhookd.CircuitClosed:
		d.log.Warn("endpoint circuit opened", "endpoint_id", c.EndpointID, "failures", c.Failures, "next_probe_at", c.ProbeAt)
		d.metrics.circuits.WithLabelValues("opened").Inc()
	}
	if c.To == webhookd.CircuitOpen && c.ProbeAt != nil {
		// The probe's wake-up (lost, the reconciler offers it again).
		if _, err := d.holder.queue.EnqueueProbe(context.WithoutCancel(ctx), c.EndpointID, *c.ProbeAt, false); err != nil {
			d.log.Debug("probe not scheduled; the reconciler will", "endpoint_id", c.EndpointID, "err", err)
		}
	}
	if c.Disabled {
		d.log.Warn("endpoint disabled: no successful attempt within the disable window", "endpoint_id", c.EndpointID)
		d.metrics.circuits.WithLabelValues("disabled").Inc()
	}
}
