package dispatcher

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
	"github.com/webhookd/webhookd/wire"
)

// Inspector makes the dashboard's "Send to inspector" attempts: a real
// signed delivery of an event, made by the same code as every attempt
// (Deliverer.send: same body, same signature, same headers, the attempt
// number the delivery's next attempt will carry), sent to an inspector
// bin instead of the endpoint, and logged as an attempt with trigger
// inspector that never changes the delivery: no lease is taken and its
// status, schedule and counts stay as they are.
//
// An endpoint's transformation applies as it would to the delivery: its
// body (signed) and headers go to the bin, which keeps its own URL (a path
// the script sets would leave the bin); one that cancels or fails is
// logged as an attempt that sent nothing, with why.
//
// It needs no worker: only PostgreSQL, and the transport the caller gives
// for the bin's URL (the dashboard serves its bins in-process, so the
// SSRF guard never sees them and private networks may stay disallowed).
type Inspector struct {
	db         *storage.DB
	clock      webhookd.Clock
	log        *slog.Logger
	transforms *transform.Engine // with the workers' budget and payload limit
}

// NewInspector returns an Inspector; clock and log default to the system
// clock and slog.Default(). tc is the transformations' budget and output
// bound, the workers' own (WEBHOOKD_TRANSFORM_TIMEOUT,
// WEBHOOKD_MAX_PAYLOAD_BYTES), so that a send to a bin is the request a
// delivery would make.
func NewInspector(db *storage.DB, clock webhookd.Clock, log *slog.Logger, tc transform.Config) *Inspector {
	if clock == nil {
		clock = webhookd.SystemClock{}
	}
	return &Inspector{db: db, clock: clock, log: cmp.Or(log, slog.Default()), transforms: transform.NewEngine(tc)}
}

// inspectorTimeout bounds one inspector attempt, every phase of it.
const inspectorTimeout = 10 * time.Second

// Send makes one signed attempt of the delivery to url through rt and logs
// it with trigger inspector. The endpoint's own URL is never contacted, and
// the endpoint may be disabled. A delivery that does not exist returns
// not_found. The attempt is returned as logged (a failed request is an
// attempt with its error, not an error).
func (in *Inspector) Send(ctx context.Context, deliveryID, url string, rt http.RoundTripper) (webhookd.Attempt, error) {
	l, err := in.db.InspectionLease(ctx, deliveryID)
	if err != nil {
		return webhookd.Attempt{}, err
	}
	l.Endpoint.URL, l.Token = url, storage.NewRequestID()
	// A Deliverer that only sends: request uses its sender, clock and
	// log, and nothing of a worker's.
	sender := &Deliverer{clock: in.clock, log: in.log, sender: wire.Sender{BodyTimeout: inspectorTimeout,
		Client: &http.Client{Transport: rt, Timeout: inspectorTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}}
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), inspectorTimeout)
	var a webhookd.Attempt
	if tr, unsent := in.transformed(sendCtx, &l); unsent != "" {
		a = webhookd.Attempt{DeliveryID: l.Delivery.ID, Number: l.Delivery.AttemptsCount + 1, RequestID: l.Token, URL: url,
			Trigger: webhookd.TriggerInspector, StartedAt: in.clock.Now(), Error: &unsent,
			RequestHeaders: map[string]string{}, ResponseHeaders: map[string]string{}}
	} else {
		a, _ = sender.request(sendCtx, &l, webhookd.TriggerInspector, tr)
	}
	cancel()
	if err := in.db.RecordInspectorAttempt(context.WithoutCancel(ctx), a); err != nil {
		return a, fmt.Errorf("inspector: %w", err)
	}
	in.log.Info("inspector attempt", "delivery_id", l.Delivery.ID, "event_id", l.Delivery.EventID,
		"endpoint_id", l.Delivery.EndpointID, "attempt", a.Number, "trigger", a.Trigger, "request_id", a.RequestID,
		"status_code", orNil(a.StatusCode), "error", orNil(a.Error), "duration_ms", a.DurationMS)
	return a, nil
}

// transformed runs the endpoint's transformation of l, if it has one, on
// the request to the bin (l.Endpoint.URL): the request to send instead (nil:
// none), or why nothing is sent.
func (in *Inspector) transformed(ctx context.Context, l *storage.Lease) (*transform.Result, string) {
	if l.Endpoint.Transformation == nil || l.SecretErr != nil {
		return nil, ""
	}
	out, err := runTransformation(ctx, in.transforms, "inspector:"+l.Delivery.EndpointID, l)
	switch {
	case err != nil:
		return nil, wire.StorableText(err.Error(), wire.MaxResponseBody)
	case out.Cancel:
		return nil, "not sent: the endpoint's transformation canceled the delivery"
	}
	out.URL = l.Endpoint.URL // the bin's
	return &out, ""
}
