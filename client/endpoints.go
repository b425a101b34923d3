package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
)

// CreateEndpoint creates an endpoint (POST /v1/endpoints); the answer
// carries its Secret. Errors: ErrValidationFailed naming the field.
func (c *Client) CreateEndpoint(ctx context.Context, ep NewEndpoint, opts ...CallOption) (*Endpoint, error) {
	r, err := post("/v1/endpoints", ep, opts)
	if err != nil {
		return nil, err
	}
	var out Endpoint
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Endpoints lists the project's endpoints, following cursors (GET
// /v1/endpoints); pageSize 0 takes the API's default.
func (c *Client) Endpoints(ctx context.Context, pageSize int) iter.Seq2[Endpoint, error] {
	q := url.Values{}
	setLimit(q, pageSize)
	return list[Endpoint](ctx, c, "/v1/endpoints", q)
}

// Endpoint reads one endpoint (GET /v1/endpoints/{id}).
func (c *Client) Endpoint(ctx context.Context, id string) (*Endpoint, error) {
	var out Endpoint
	if err := c.do(ctx, newRequest("GET", endpointPath(id), nil), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateEndpoint changes an endpoint (PATCH /v1/endpoints/{id}) and
// returns it with its new Version. With IfMatch(version) it applies only to
// that version, else fails with ErrVersionMismatch. PATCH carries no
// Idempotency-Key: it is retried because applying the same change twice
// changes nothing more, but a conditional one retried after a lost answer
// may report ErrVersionMismatch although its first try applied (read the
// endpoint to tell).
func (c *Client) UpdateEndpoint(ctx context.Context, id string, p EndpointPatch, opts ...CallOption) (*Endpoint, error) {
	r := newRequest(http.MethodPatch, endpointPath(id), opts)
	if err := r.setBody(p); err != nil {
		return nil, err
	}
	var out Endpoint
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteEndpoint deletes an endpoint (DELETE /v1/endpoints/{id}). A retry
// that finds it gone (because an earlier try's answer was lost) succeeds.
func (c *Client) DeleteEndpoint(ctx context.Context, id string) error {
	r := newRequest(http.MethodDelete, endpointPath(id), nil)
	r.deleteCall = true
	return c.do(ctx, r, nil)
}

// EndpointSecret reads an endpoint's signing secret, and the previous one
// while it still signs (GET /v1/endpoints/{id}/secret).
func (c *Client) EndpointSecret(ctx context.Context, id string) (*Secret, error) {
	var out Secret
	if err := c.do(ctx, newRequest("GET", endpointPath(id)+"/secret", nil), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RotateEndpointSecret makes a new signing secret (POST
// /v1/endpoints/{id}/rotate-secret); the old one keeps signing beside it
// for 24 h.
func (c *Client) RotateEndpointSecret(ctx context.Context, id string, opts ...CallOption) (*Secret, error) {
	r, err := post(endpointPath(id)+"/rotate-secret", struct{}{}, opts)
	if err != nil {
		return nil, err
	}
	var out Secret
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TestEndpoint sends a webhookd.test event to this endpoint alone (POST
// /v1/endpoints/{id}/test) with data, or a default message when data is
// nil, and returns its delivery. The API does not deduplicate this route,
// so it is retried only when the API certainly did not act (429, or no
// connection made).
func (c *Client) TestEndpoint(ctx context.Context, id string, data any) (*Delivery, error) {
	r := newRequest(http.MethodPost, endpointPath(id)+"/test", nil)
	r.mode = retryRefused
	body := map[string]any{}
	if data != nil {
		body["data"] = data
	}
	if err := r.setBody(body); err != nil {
		return nil, err
	}
	var out Delivery
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TestTransformation shows the request an endpoint's transformation (or
// t.Transformation, before saving it) makes of an event (POST
// /v1/endpoints/{id}/transformation/test), without sending anything. A
// script that fails is an *Error with code validation_failed, field
// transformation and the script's error.
func (c *Client) TestTransformation(ctx context.Context, id string, t TransformationTest) (*TransformationResult, error) {
	r := newRequest(http.MethodPost, endpointPath(id)+"/transformation/test", nil)
	if err := r.setBody(t); err != nil {
		return nil, err
	}
	var out TransformationResult
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func endpointPath(id string) string { return "/v1/endpoints/" + url.PathEscape(id) }
