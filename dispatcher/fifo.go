package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// Ordered endpoints (ordering fifo, SPEC §3): PostgreSQL decides whose
// turn it is — an automatic claim takes only the head of an endpoint's
// queue (storage.ClaimDeliveries) — and Redis only carries the turn:
//
//   - a delivery whose claim finds others ahead of it waits in its
//     endpoint's held set with a score far off (waitTurn), its task asleep,
//     costing nothing however long the queue;
//   - the attempt that ends the head (a success or a dead letter) reads
//     the new head from PostgreSQL and attempts it itself, and so on down
//     the queue (passTurn); where it stops, the head's task is parked for
//     its time or moved to the front of the held set (score 0), where the
//     holder wakes it;
//   - should that step be lost (the worker killed between the record and
//     the wake, Redis flushed), the reconciler finds every queue's head
//     that is due and not leased, and moves it to the front the same way
//     (Queue.promote); a head with no task at all gets one like any due
//     delivery.
//
// So a kill, a Redis loss or a second worker can delay a queue but never
// run two of its deliveries at once or out of order.

// waitTurn parks the task id of a delivery that is not the head of its
// endpoint's queue until passTurn or the reconciler moves it to the
// front. ZADD LT: if the turn came while its claim was on the way (the
// score is 0 already), it stays at the front.
func (h *holder) waitTurn(ctx context.Context, ep, id string) error {
	at := h.clock.Now().Add(holdFor)
	if err := h.queue.park(ctx, ep, id, float64(at.UnixMilli()), true); err != nil { // cannot park it: look again soon instead
		return &RetryAt{At: h.clock.Now().Add(h.interval * 10), Reason: WaitFIFOTurn}
	}
	h.remember(ep)
	h.held.WithLabelValues(WaitFIFOTurn).Inc()
	return &RetryAt{At: at, Reason: "held back: waiting for its turn"}
}

// promote puts delivery id at the front of its endpoint's held set, so the
// next wake of the endpoint (a holder's pass, in any worker) runs it: its
// task is moved to pending, or made again if Redis lost it.
func (q *Queue) promote(ctx context.Context, ep, id string) error {
	return q.park(ctx, ep, id, 0, false)
}

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
			d.wakeHead(context.WithoutCancel(ctx), ep, id)
			return
		}
		res, err := d.attempt(ctx, Request{DeliveryID: id, EndpointID: ep, chained: true})
		var at *RetryAt
		switch {
		case res.turn != "":
			d.holder.drop(context.WithoutCancel(ctx), ep, id)
		case errors.As(err, &at):
			// Its task sleeps in the held set until its time: a hold parked
			// it sooner already (LT keeps the sooner time).
			d.holder.queue.park(context.WithoutCancel(ctx), ep, id, float64(at.At.UnixMilli()), true)
			return
		default:
			d.wakeHead(context.WithoutCancel(ctx), ep, id)
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
	now := d.clock.Now()
	ls, err := d.db.ClaimDeliveries(ctx, now, now.Add(d.lease), cs)
	if c, ok := d.clock.(*dbClock); ok {
		for _, l := range ls {
			if l.Found {
				c.learn(l.Now)
				break
			}
		}
	}
	return ls, err
}

// wakeHead moves an ordered queue's head to the front of its endpoint's
// held set and wakes it.
func (d *Deliverer) wakeHead(ctx context.Context, ep, id string) {
	if err := d.holder.queue.promote(ctx, ep, id); err != nil {
		d.log.Debug("waking the next delivery of an ordered endpoint failed; the reconciler will", "endpoint_id", ep,
			"delivery_id", id, "err", err)
		return
	}
	d.holder.remember(ep)
	d.holder.wake(ctx, ep)
}

// dropScript takes task ARGV[1] out of its endpoint's held set (KEYS[1])
// and, if it sleeps in asynq's retry or scheduled set, deletes it: its
// delivery is done, made by a chained attempt. ARGV[2] is the queue's asynq
// key prefix (asynq v0.26's layout, as wakeScript follows it). A task that
// is pending or running is left alone: it finds its delivery done.
var dropScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
local key = ARGV[2] .. 't:' .. ARGV[1]
local state = redis.call('HGET', key, 'state')
if state == 'retry' or state == 'scheduled' then
	redis.call('ZREM', ARGV[2] .. state, ARGV[1])
	redis.call('DEL', key)
end
return 0`)

// drop forgets the parked task of a delivery a chained attempt finished.
// Failing, it leaves a task that wakes to find its delivery done.
func (h *holder) drop(ctx context.Context, ep, id string) {
	dropScript.Run(ctx, h.rdb, []string{h.key(ep)}, id, "asynq:{"+h.queue.queue+"}:")
}

// leftQueue tells whether an applied record took a delivery out of its
// ordered endpoint's queue, so the next one's turn has come.
func leftQueue(l *storage.Lease, t storage.Transition) bool {
	waiting := l.Delivery.Status == webhookd.DeliveryPending || l.Delivery.Status == webhookd.DeliveryRetrying
	return l.FIFO && waiting && (t.Status == webhookd.DeliverySucceeded || t.Status == webhookd.DeliveryDeadLetter)
}

// promoteHeads moves the due, unleased head of every ordered endpoint's
// queue to the front of its held set: the reconciler's backstop for a
// turn that passTurn never passed on.
func (r *Reconciler) promoteHeads(ctx context.Context) {
	heads, err := r.DB.FIFOHeads(ctx, r.Clock.Now().Add(-r.grace()))
	if err != nil {
		r.Logger.Warn("reconciler: reading the heads of ordered queues failed", "err", err)
		return
	}
	for _, h := range heads {
		if err := r.Queue.promote(ctx, h.EndpointID, h.ID); err != nil {
			r.Logger.Warn("reconciler: waking the head of an ordered queue failed", "endpoint_id", h.EndpointID, "err", err)
			return
		}
	}
}
