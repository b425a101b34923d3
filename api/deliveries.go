package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// deliveryStatuses are the values ?status= accepts.
var deliveryStatuses = webhookd.DeliveryStatuses

// testEventData is the data of a test event when the request names none.
var testEventData = json.RawMessage(`{"message":"This is a test event from webhookd"}`)

// listDeliveries serves GET /v1/deliveries, newest first.
func (s *Server) listDeliveries(c *call) (int, any, error) {
	page, err := pageOf(c.r)
	if err != nil {
		return 0, nil, err
	}
	q := c.r.URL.Query()
	f := storage.DeliveryFilter{Status: q.Get("status"), EndpointID: q.Get("endpoint_id"),
		EventType: q.Get("event_type"), EventID: q.Get("event_id")}
	if f.Status != "" && !slices.Contains(deliveryStatuses, f.Status) {
		return 0, nil, webhookd.Invalid("status", `must be one of "pending", "retrying", "succeeded", "dead_letter"`)
	}
	if f.Since, err = queryTime(q, "since"); err != nil {
		return 0, nil, err
	}
	list, more, err := c.store.ListDeliveries(c.ctx, c.project.ID, f, page)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, pageOut(list, more, deliveryOut, func(v webhookd.Delivery) string { return v.ID }), nil
}

// getDelivery serves GET /v1/deliveries/{id}: the delivery with its
// attempts, oldest first.
func (s *Server) getDelivery(c *call) (int, any, error) {
	d, err := c.store.GetDelivery(c.ctx, c.project.ID, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	out := deliveryWithAttemptsJSON{deliveryJSON: deliveryOut(d), Attempts: make([]attemptJSON, len(d.Attempts))}
	for i, a := range d.Attempts {
		out.Attempts[i] = attemptOut(a)
	}
	return http.StatusOK, out, nil
}

// redeliver serves POST /v1/deliveries/{id}/redeliver: one manual attempt
// now, whatever the delivery's state, answered 202 with the delivery as it
// is. The request is recorded on the delivery in the response's transaction
// and enqueued after it commits; if Redis loses it, the reconciler enqueues
// it again from PostgreSQL.
func (s *Server) redeliver(c *call) (int, any, error) {
	if err := emptyObject(c.body); err != nil {
		return 0, nil, err
	}
	requestID := storage.NewRequestID()
	d, err := c.store.RequestRedelivery(c.ctx, c.project.ID, c.r.PathValue("id"), requestID, "api")
	if err != nil {
		return 0, nil, err
	}
	c.afterCommit = func(ctx context.Context) {
		if s.cfg.Enqueuer == nil {
			return
		}
		if err := s.cfg.Enqueuer.EnqueueManual(ctx, requestID, d.ID, "api"); err != nil {
			s.log.WarnContext(ctx, "enqueue redelivery failed; the reconciler will pick it up", "delivery_id", d.ID, "err", err)
		}
	}
	return http.StatusAccepted, deliveryOut(d), nil
}

// testEndpoint serves POST /v1/endpoints/{id}/test: a webhookd.test event
// for this endpoint alone, answered 202 with its delivery, which is enqueued
// once the response is out; its attempts are logged with trigger test. A disabled endpoint is refused
// (validation_failed, field "endpoint").
func (s *Server) testEndpoint(c *call) (int, any, error) {
	data := testEventData
	if len(strings.TrimSpace(string(c.body))) > 0 {
		var d json.RawMessage
		present, err := decodeObject(c.body, "", map[string]any{"data": &d})
		if err != nil {
			return 0, nil, err
		}
		if present["data"] {
			data = compactJSON(d)
		}
	}
	ep, err := c.store.GetEndpoint(c.ctx, c.project.ID, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	disabled := &webhookd.Error{Code: webhookd.CodeValidationFailed, Field: "endpoint",
		Message: "endpoint is disabled; enable it to send a test event"}
	if ep.Status != webhookd.EndpointActive {
		return 0, nil, disabled
	}
	now := s.clock.Now()
	evs, err := c.store.CreateEvents(c.ctx, c.project.ID, []storage.NewEvent{{Type: webhookd.TestEventType, Data: data,
		EndpointIDs: []string{ep.ID}, Trigger: webhookd.TriggerTest, TraceParent: s.cfg.Tracer.TraceParent(c.ctx)}}, now,
		func(int) string { return "" })
	if err != nil {
		return 0, nil, err
	}
	if len(evs[0].Deliveries) == 0 { // disabled meanwhile
		return 0, nil, disabled
	}
	d, err := c.store.GetDelivery(c.ctx, c.project.ID, evs[0].Deliveries[0].ID)
	if err != nil {
		return 0, nil, err
	}
	c.afterCommit = func(ctx context.Context) { s.enqueue(ctx, now, evs) }
	return http.StatusAccepted, deliveryOut(d), nil
}

// emptyObject accepts an empty body or {} and refuses anything else.
func emptyObject(body []byte) error {
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	_, err := decodeObject(body, "", map[string]any{})
	return err
}

// queryTime reads the RFC 3339 time of query parameter name; absent or
// empty is nil. A "+" of a zone offset that arrived unescaped (as a space)
// is taken back.
func queryTime(q url.Values, name string) (*time.Time, error) {
	if q.Get(name) == "" {
		return nil, nil
	}
	return parseTime(name, strings.ReplaceAll(q.Get(name), " ", "+"))
}

// parseTime reads an RFC 3339 time named field.
func parseTime(field, v string) (*time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, webhookd.Invalid(field, "must be an RFC 3339 time, like 2025-01-02T15:04:05Z")
	}
	t = t.UTC()
	return &t, nil
}
