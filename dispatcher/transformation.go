package dispatcher

import (
	"context"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
	"github.com/webhookd/webhookd/wire"
)

// transformed runs the transformation of a claimed delivery's endpoint, if
// it has one (SPEC §3 "Filters and transformations"), on the request the
// delivery would be sent as, before anything is signed. goOn: send it,
// as tr says (nil: the endpoint has none, and pays nothing for it). Else
// the attempt ended here, as a success ends it — the slot and, on an
// ordered endpoint, the turn are given up (finish):
//
//   - cancel: true makes no attempt; a delivery still waiting ends
//     canceled, one already done (a person's redelivery) stays as it was;
//   - a script that throws, runs past its budget or returns what cannot be
//     sent fails at once: an attempt is recorded that sent nothing (no
//     status code, the script's error), and the delivery follows Classify's
//     dead letter, reason transformation_failed (a person's attempt leaves
//     the state as any failed one does: transition).
//
// It runs before the circuit's probe is taken, so that a canceled or
// failed delivery never holds the probe.
func (d *Deliverer) transformed(ctx context.Context, r Request, l *storage.Lease, slot *endpointSlot) (tr *transform.Result, res Result, err error, goOn bool) {
	src := l.Endpoint.Transformation
	if src == nil || l.SecretErr != nil { // unsigned, it fails unsent anyway (request)
		return nil, Result{}, nil, true
	}
	del := l.Delivery
	// The budget bounds the run; a task's end (a shutdown) must not
	// interrupt it and dead-letter the delivery for webhookd's own reason.
	out, terr := runTransformation(context.WithoutCancel(ctx), d.transforms, l.Delivery.EndpointID, l)
	if terr == nil && !out.Cancel {
		return &out, Result{}, nil, true
	}
	slot.release() // nothing was sent: it says nothing of the endpoint
	auto, now := r.kind() == KindAuto, d.clock.Now()
	if terr == nil {
		t := storage.Transition{Status: webhookd.DeliveryCanceled, ManualDone: r.kind() == KindManual, Now: now}
		if del.Status != webhookd.DeliveryPending && del.Status != webhookd.DeliveryRetrying {
			t.Status = del.Status
		}
		res, err = d.finish(ctx, r, l, nil, t)
		d.log.Info("delivery canceled by its endpoint's transformation", "delivery_id", del.ID, "event_id", del.EventID,
			"endpoint_id", del.EndpointID, "outcome", t.Status)
		return nil, res, err, false
	}
	trigger := l.Trigger
	if !auto {
		trigger = webhookd.TriggerManual
	}
	msg := wire.StorableText(terr.Error(), wire.MaxResponseBody)
	a := webhookd.Attempt{DeliveryID: del.ID, Number: del.AttemptsCount + 1, RequestID: l.Token, URL: l.Endpoint.URL,
		Trigger: trigger, StartedAt: now, Error: &msg, RequestHeaders: map[string]string{}, ResponseHeaders: map[string]string{}}
	t := transition(del.Status, del.NextAttemptAt, r,
		Outcome{Status: webhookd.DeliveryDeadLetter, Reason: webhookd.ReasonTransformationFailed}, now)
	res, err = d.finish(ctx, r, l, &a, t)
	if err != nil || !res.Attempted {
		return nil, res, err, false
	}
	d.metrics.observe(a, t.Status)
	d.log.Warn("delivery attempt not sent: its endpoint's transformation failed", "delivery_id", del.ID,
		"event_id", del.EventID, "endpoint_id", del.EndpointID, "attempt", a.Number, "trigger", trigger,
		"request_id", a.RequestID, "error", msg, "outcome", t.Status)
	return nil, res, nil, false
}

// runTransformation runs l's endpoint's transformation, in e's runtimes
// for key, on the request its delivery would be sent as. The URL it
// returns has the endpoint's host and passes the API's check of an
// endpoint URL (the engine sees to both); the request then goes through
// the same client, whose dial-time guard checks the address the host
// resolves to, as for any delivery. The engine keeps one pool of runtimes
// per key (an endpoint's) and replaces it when the key's source changes.
func runTransformation(ctx context.Context, e *transform.Engine, key string, l *storage.Lease) (transform.Result, error) {
	w, err := transform.WebhookOf(l.Endpoint.URL, l.Event)
	if err != nil {
		return transform.Result{}, err
	}
	return e.Run(ctx, key, *l.Endpoint.Transformation, w)
}
