package client

import (
	"context"
	"iter"
	"net/url"
)

// SendEvent sends one event (POST /v1/events) and returns it with its
// deliveries. It is one logical operation: every retry carries the same
// Idempotency-Key, so the API creates the event once however often the
// request is repeated. Errors: ErrValidationFailed, ErrPayloadTooLarge,
// ErrExternalIDTaken, ErrIdempotencyKeyMismatch (a reused key with another
// body), and the rest of the API's codes.
func (c *Client) SendEvent(ctx context.Context, ev NewEvent, opts ...CallOption) (*Event, error) {
	r, err := post("/v1/events", ev, opts)
	if err != nil {
		return nil, err
	}
	var out Event
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SendEvents sends up to 1000 events at once (POST /v1/events/batch), all
// or none: one bad item fails the batch with ErrValidationFailed and a
// Field like "events[3].type". The events come back in the same order.
func (c *Client) SendEvents(ctx context.Context, evs []NewEvent, opts ...CallOption) ([]Event, error) {
	if evs == nil {
		evs = []NewEvent{}
	}
	r, err := post("/v1/events/batch", map[string]any{"events": evs}, opts)
	if err != nil {
		return nil, err
	}
	var out struct {
		Data []Event `json:"data"`
	}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// Event reads one event and its deliveries (GET /v1/events/{id});
// ErrNotFound when it is not the key's project's.
func (c *Client) Event(ctx context.Context, id string) (*Event, error) {
	var out Event
	if err := c.do(ctx, newRequest("GET", "/v1/events/"+url.PathEscape(id), nil), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Deliveries lists deliveries matching f, newest first, following cursors
// (GET /v1/deliveries). Stop ranging to stop fetching.
func (c *Client) Deliveries(ctx context.Context, f DeliveryFilter) iter.Seq2[Delivery, error] {
	q := url.Values{}
	setQuery(q, "status", f.Status)
	setQuery(q, "endpoint_id", f.EndpointID)
	setQuery(q, "event_type", f.EventType)
	setQuery(q, "event_id", f.EventID)
	setTime(q, "since", f.Since)
	setLimit(q, f.PageSize)
	return list[Delivery](ctx, c, "/v1/deliveries", q)
}

// Delivery reads one delivery with all its attempts, oldest first (GET
// /v1/deliveries/{id}).
func (c *Client) Delivery(ctx context.Context, id string) (*Delivery, error) {
	var out Delivery
	if err := c.do(ctx, newRequest("GET", "/v1/deliveries/"+url.PathEscape(id), nil), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Redeliver makes one manual attempt of a delivery now, dead letters
// included (POST /v1/deliveries/{id}/redeliver). ErrEndpointDisabled while
// its endpoint is disabled.
func (c *Client) Redeliver(ctx context.Context, id string, opts ...CallOption) (*Delivery, error) {
	r, err := post("/v1/deliveries/"+url.PathEscape(id)+"/redeliver", struct{}{}, opts)
	if err != nil {
		return nil, err
	}
	var out Delivery
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeadLetters lists dead letters matching f, newest first, following
// cursors (GET /v1/dead-letters). Replayed ones stay listed with
// ReplayedAt set.
func (c *Client) DeadLetters(ctx context.Context, f DeadLetterFilter) iter.Seq2[DeadLetter, error] {
	q := url.Values{}
	setQuery(q, "endpoint_id", f.EndpointID)
	setQuery(q, "event_type", f.EventType)
	setTime(q, "since", f.Since)
	setTime(q, "until", f.Until)
	setLimit(q, f.PageSize)
	return list[DeadLetter](ctx, c, "/v1/dead-letters", q)
}

// ReplayDeadLetters replays every dead letter matching f as a background
// job (POST /v1/dead-letters/replay) and returns the job's id; follow it
// with Job.
func (c *Client) ReplayDeadLetters(ctx context.Context, f DeadLetterFilter, opts ...CallOption) (string, error) {
	body := map[string]string{}
	if f.EndpointID != "" {
		body["endpoint_id"] = f.EndpointID
	}
	if f.EventType != "" {
		body["event_type"] = f.EventType
	}
	if !f.Since.IsZero() {
		body["since"] = f.Since.UTC().Format(timeLayout)
	}
	if !f.Until.IsZero() {
		body["until"] = f.Until.UTC().Format(timeLayout)
	}
	r, err := post("/v1/dead-letters/replay", body, opts)
	if err != nil {
		return "", err
	}
	var out struct {
		JobID string `json:"job_id"`
	}
	if err := c.do(ctx, r, &out); err != nil {
		return "", err
	}
	return out.JobID, nil
}

// Job reads a background job's progress (GET /v1/jobs/{id}).
func (c *Client) Job(ctx context.Context, id string) (*Job, error) {
	var out Job
	if err := c.do(ctx, newRequest("GET", "/v1/jobs/"+url.PathEscape(id), nil), &out); err != nil {
		return nil, err
	}
	return &out, nil
}
