package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// Ordered endpoints (ordering fifo, SPEC §3): PostgreSQL decides whose
// turn it is — an automatic claim takes only the head of an endpoint's
// queue (storage.ClaimDeliveries), whose numbers follow commit order — and
// asynq only carries the turn:
//
//   - a delivery whose claim finds others ahead of it waits, fifo_turn in
//     PostgreSQL, its task asleep far off (waitTurn), costing nothing
//     however long the queue;
//   - the attempt that ends the head (a success, a cancel by its
//     endpoint's transformation, a dead letter of any kind) reads the new
//     head from PostgreSQL and attempts it itself, and so on down the
//     queue (passTurn); where it stops, the head's task is scheduled for
//     its time, or run now (Queue.Wake);
//   - should that step be lost (the worker killed between the record and
//     the wake, Redis flushed), the reconciler finds every queue's head
//     that is due and not leased, and wakes it the same way.
//
// So a kill, a Redis loss or a second worker can delay a queue but never
// run two of its deliveries at once or out of order.

// waitTurn holds back delivery id, which is not the head of its endpoint's
// queue, until passTurn or the reconciler wakes it.
func (h *holder) waitTurn(ctx context.Context, id string) error {
	if _, err := h.holds.Do(context.WithoutCancel(ctx), storage.Hold{DeliveryID: id, Reason: webhookd.WaitingFIFOTurn}); err != nil {
		return &RetryAt{At: h.clock.Now().Add(time.Second), Reason: webhookd.WaitingFIFOTurn}
	}
	h.held.WithLabelValues(webhookd.WaitingFIFOTurn).Inc()
	return &RetryAt{At: h.clock.Now().Add(holdFor), Reason: "held back: waiting for its turn"}
}

// chainWait is the longest a chain waits for its head's retry itself
// rather than handing it to asynq, whose times are whole seconds.
const chainWait = time.Second

// chainFor is how many deliveries of an ordered endpoint's queue one task
// attempts after its own at most (passTurn) before the next one's own task
// takes over.
const chainFor = 100

// passTurn goes on with an ordered endpoint's queue after an attempt took
// its delivery out of it: it makes the new head's attempt itself, on this
// goroutine, then the next, while each succeeds or dead-letters (no trip
// through Redis between them), up to chainFor of them and while the task's
// time leaves room for one more attempt to end within it. The head's own
// task, parked in the held set, is dropped once its delivery is done. When the chain stops at a delivery that must wait
// (a retry on its schedule, no room at its endpoint, an open circuit), that
// delivery's task is parked for then; when it stops for the chain's length
// or time, the head is moved to the front of the held set for the holder to
// wake. A failure here (PostgreSQL or Redis unreachable) only delays the
// queue until the reconciler's next pass moves its head to the front.
func (d *Deliverer) passTurn(ctx context.Context, ep string) {
	for n := 0; ; n++ {
		id, err := d.db.FIFOHead(context.WithoutCancel(ctx), ep)
		if err != nil || id == "" {
			return
		}
		if deadline, ok := ctx.Deadline(); n >= chainFor || ctx.Err() != nil || ok && time.Until(deadline) < d.attemptTimeout+5*time.Second {
			d.holder.queue.Wake(context.WithoutCancel(ctx), ep, id)
			return
		}
		res, err := d.attempt(ctx, Request{DeliveryID: id, EndpointID: ep, chained: true})
		var at *RetryAt
		switch {
		case res.turn != "":
			d.holder.queue.Drop(id) // its own task sleeps: done, it need not wake
		case errors.As(err, &at) && res.Attempted && time.Until(at.At) <= chainWait:
			// A retry due within a moment: the queue waits for it anyway,
			// and asynq keeps times in whole seconds.
			t := time.NewTimer(time.Until(at.At))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		case errors.As(err, &at):
			// Its own task sleeps for its turn: it sleeps until then instead.
			d.holder.queue.Reschedule(context.WithoutCancel(ctx), ep, id, at.At)
			return
		default:
			d.holder.queue.Wake(context.WithoutCancel(ctx), ep, id)
			return
		}
	}
}

// claim leases a delivery for an attempt: through the claims group, or
// alone for a chained attempt.
func (d *Deliverer) claim(ctx context.Context, r Request, c storage.Claim) (storage.Lease, error) {
	if !r.chained {
		return d.claims.Do(ctx, c)
	}
	ls, err := d.claimNow(ctx, []storage.Claim{c})
	if err != nil {
		return storage.Lease{}, err
	}
	return ls[0], nil
}

// claimNow runs claims at PostgreSQL's time as this process knows it, and
// learns that time again from their answer.
func (d *Deliverer) claimNow(ctx context.Context, cs []storage.Claim) ([]storage.Lease, error) {
	c, _ := d.clock.(*dbClock)
	var sent time.Time
	if c != nil {
		sent = c.sent()
	}
	now := d.clock.Now()
	ls, err := d.db.ClaimDeliveries(ctx, now, now.Add(d.lease), cs)
	for _, l := range ls {
		if c != nil && l.Found {
			c.learn(l.Now, sent)
			break
		}
	}
	return ls, err
}

// leftQueue tells whether an applied record took a delivery out of its
// ordered endpoint's queue, so the next one's turn has come.
func leftQueue(l *storage.Lease, t storage.Transition) bool {
	waiting := l.Delivery.Status == webhookd.DeliveryPending || l.Delivery.Status == webhookd.DeliveryRetrying
	return l.FIFO && waiting && (t.Status == webhookd.DeliverySucceeded || t.Status == webhookd.DeliveryDeadLetter ||
		t.Status == webhookd.DeliveryCanceled)
}

// wakeHeads wakes the due, unleased head of every ordered endpoint's
// queue: the reconciler's backstop for a turn that passTurn never passed
// on. It offers them as offerDue offers due deliveries: a head with no
// task gets one, a sleeping task runs now, and one that a worker took and
// never claimed (a worker killed as its claim found the delivery not yet
// the head) is attempted here, not left to asynq's recoverer, which gives
// it back only a minute or two later and stalls the whole queue meanwhile.
func (r *Reconciler) wakeHeads(ctx context.Context, lost bool) {
	heads, err := r.DB.FIFOHeads(ctx, r.Clock.Now().Add(-r.grace()))
	if err != nil {
		r.Logger.Warn("reconciler: reading the heads of ordered queues failed", "err", err)
		return
	}
	_, taken, err := r.Queue.offer(ctx, heads, true)
	if err != nil {
		r.Logger.Warn("reconciler: waking the heads of ordered queues failed", "err", err)
	}
	if len(taken) > 0 && !lost && r.Attempt != nil {
		r.Logger.Warn("attempting heads of ordered queues whose tasks a worker took and never ran", "deliveries", len(taken))
		r.Attempt(ctx, taken)
	}
}
