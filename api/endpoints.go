package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/filter"
	"github.com/webhookd/webhookd/internal/netguard"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
)

// Endpoint input limits.
const (
	maxDescriptionLength = 1024
	maxEventTypes        = 256
	maxRatePerSecond     = 100000
	maxInFlight          = webhookd.DefaultMaxInFlight // the highest max_in_flight, per worker process, and its default
)

// endpointInput is the writable part of an endpoint, as decoded.
type endpointInput struct {
	URL                string
	Description        string
	EventTypes         []string
	RateLimitPerSecond *int
	MaxInFlight        *int
	Ordering           string
	Filter             json.RawMessage // compacted once checked; "null": none
	Transformation     *string         // nil: none
	Status             string
	ReplayDeadLetters  bool // PATCH only
}

func (in *endpointInput) fields() map[string]any {
	return map[string]any{"url": &in.URL, "description": &in.Description, "event_types": &in.EventTypes,
		"rate_limit_per_second": &in.RateLimitPerSecond, "max_in_flight": &in.MaxInFlight,
		"ordering": &in.Ordering, "filter": &in.Filter, "transformation": &in.Transformation, "status": &in.Status, "replay_dead_letters": &in.ReplayDeadLetters}
}

// createEndpoint serves POST /v1/endpoints.
func (s *Server) createEndpoint(c *call) (int, any, error) {
	var in endpointInput
	fields := in.fields()
	delete(fields, "status")
	delete(fields, "replay_dead_letters")
	present, err := decodeObject(c.body, "", fields)
	if err != nil {
		return 0, nil, err
	}
	if !present["url"] {
		return 0, nil, webhookd.Invalid("url", "is required")
	}
	if err := s.validateEndpoint(&in, present); err != nil {
		return 0, nil, err
	}
	secret, err := newSecret()
	if err != nil {
		return 0, nil, err
	}
	e, err := c.store.CreateEndpoint(c.ctx, c.project.ID, storage.NewEndpoint{URL: in.URL, Description: in.Description,
		EventTypes: in.EventTypes, RateLimitPerSecond: in.RateLimitPerSecond, MaxInFlight: in.MaxInFlight,
		Ordering: in.Ordering, Filter: in.Filter, Transformation: in.Transformation, Secret: secret}, s.clock.Now())
	if err != nil {
		return 0, nil, err
	}
	c.secret = true
	return http.StatusCreated, endpointWithSecretJSON{endpointJSON: endpointOut(e), Secret: e.Secret}, nil
}

// validateEndpoint checks the fields present in a create or patch, and
// puts the URL in its canonical form.
func (s *Server) validateEndpoint(in *endpointInput, present map[string]bool) error {
	if present["url"] {
		u, err := s.validateURL(in.URL)
		if err != nil {
			return err
		}
		in.URL = u
	}
	if present["description"] && len(in.Description) > maxDescriptionLength {
		return webhookd.Invalid("description", "must be at most %d characters", maxDescriptionLength)
	}
	if present["event_types"] {
		if len(in.EventTypes) > maxEventTypes {
			return webhookd.Invalid("event_types", "must list at most %d types", maxEventTypes)
		}
		for i, t := range in.EventTypes {
			if !eventTypePattern.MatchString(t) {
				return webhookd.Invalid(fmt.Sprintf("event_types[%d]", i), "must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
			}
		}
	}
	if r := in.RateLimitPerSecond; r != nil && (*r < 1 || *r > maxRatePerSecond) {
		return webhookd.Invalid("rate_limit_per_second", "must be between 1 and %d, or null for no limit", maxRatePerSecond)
	}
	if m := in.MaxInFlight; m != nil && (*m < 1 || *m > maxInFlight) {
		return webhookd.Invalid("max_in_flight", "must be between 1 and %d, or null for the default (%d)", maxInFlight, maxInFlight)
	}
	if present["ordering"] && in.Ordering != webhookd.OrderingNone && in.Ordering != webhookd.OrderingFIFO {
		return webhookd.Invalid("ordering", `must be "none" or "fifo"`)
	}
	if present["status"] && in.Status != webhookd.EndpointActive && in.Status != webhookd.EndpointDisabled {
		return webhookd.Invalid("status", `must be "active" or "disabled"`)
	}
	if present["filter"] {
		f, err := checkFilter(in.Filter)
		if err != nil {
			return err
		}
		in.Filter = f
	}
	if present["transformation"] && in.Transformation != nil {
		if err := s.checkTransformation(*in.Transformation); err != nil {
			return err
		}
	}
	return nil
}

// checkTransformation checks an endpoint's transformation (package
// transform): JavaScript that defines function handler(webhook), loaded
// within its budget. Its error is the script's, under the field
// transformation.
func (s *Server) checkTransformation(src string) error {
	if strings.TrimSpace(src) == "" {
		return webhookd.Invalid("transformation", "must be JavaScript that defines function handler(webhook), or null for none")
	}
	if err := s.transforms.Check(src); err != nil {
		return transformationInvalid(err)
	}
	return nil
}

// transformationInvalid is a transformation's error as validation_failed.
func transformationInvalid(err error) error {
	var te *transform.Error
	if errors.As(err, &te) {
		return webhookd.Invalid("transformation", "%s", te.Message)
	}
	return err
}

// checkFilter checks an endpoint's filter (package filter) and returns it
// compacted, or nil for none (null).
func checkFilter(raw json.RawMessage) (json.RawMessage, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	if _, err := filter.Compile(raw); err != nil {
		var fe *filter.Error
		if errors.As(err, &fe) {
			return nil, webhookd.Invalid(fe.Field, "%s", fe.Message)
		}
		return nil, webhookd.Invalid("filter", "%s", err.Error())
	}
	return compactJSON(raw), nil
}

// validateURL accepts relay URLs (relay://NAME: nothing is dialled for
// them, so the address rules below do not apply) and the URLs an HTTP
// client can dial (webhookd.ParseEndpointURL). Unless private networks are allowed, a host
// that is a literal loopback, private, link-local, multicast or unspecified
// address, or localhost, is refused here too (the dial-time guard still
// checks every resolved address). It returns raw with its scheme in lower
// case (schemes are case-insensitive, RFC 3986 §3.1: HTTPS://x is
// https://x), and otherwise as given.
func (s *Server) validateURL(raw string) (string, error) {
	if _, ok := webhookd.RelayName(raw); ok {
		return raw, nil
	} else if strings.HasPrefix(raw, webhookd.RelayScheme+"://") {
		return "", webhookd.Invalid("url", "a relay URL is relay://NAME, NAME 1 to 64 characters of A-Z a-z 0-9 _ -")
	}
	u, err := webhookd.ParseEndpointURL(raw)
	if err != nil {
		return "", err
	}
	raw = u.Scheme + raw[len(u.Scheme):] // url.Parse lowered it; the rest stays as sent
	if s.cfg.AllowPrivateNetworks {
		return raw, nil
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return "", webhookd.Invalid("url", "must not point at localhost")
	}
	if ip, err := netip.ParseAddr(host); err == nil && !netguard.Allowed(ip) {
		return "", webhookd.Invalid("url", "must not point at a loopback, private, link-local or multicast address")
	}
	return raw, nil
}

// newSecret returns whsec_ + base64 of 32 random bytes.
func newSecret() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(raw), nil
}

// listEndpoints serves GET /v1/endpoints.
func (s *Server) listEndpoints(c *call) (int, any, error) {
	page, err := pageOf(c.r)
	if err != nil {
		return 0, nil, err
	}
	list, more, err := c.store.ListEndpoints(c.ctx, c.project.ID, page)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, pageOut(list, more, endpointOut, func(v webhookd.Endpoint) string { return v.ID }), nil
}

// getEndpoint serves GET /v1/endpoints/{id}.
func (s *Server) getEndpoint(c *call) (int, any, error) {
	e, err := c.store.GetEndpoint(c.ctx, c.project.ID, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	c.header.Set("ETag", strconv.Quote(strconv.Itoa(e.Version)))
	return http.StatusOK, endpointOut(e), nil
}

// patchEndpoint serves PATCH /v1/endpoints/{id}, honouring If-Match.
func (s *Server) patchEndpoint(c *call) (int, any, error) {
	var in endpointInput
	// null clears description, event_types (every type) and
	// rate_limit_per_second (no limit), and sets max_in_flight to its
	// default (1000); a null url or status fails validation.
	present, err := decodeObject(c.body, "", in.fields())
	if err != nil {
		return 0, nil, err
	}
	if err := s.validateEndpoint(&in, present); err != nil {
		return 0, nil, err
	}
	var p storage.EndpointPatch
	if present["url"] {
		p.URL = &in.URL
	}
	if present["description"] {
		p.Description = &in.Description
	}
	if present["event_types"] {
		p.EventTypes = &in.EventTypes
	}
	if present["rate_limit_per_second"] {
		p.RateLimitPerSecond = &in.RateLimitPerSecond
	}
	if present["max_in_flight"] {
		p.MaxInFlight = &in.MaxInFlight
	}
	if present["ordering"] {
		p.Ordering = &in.Ordering
	}
	if present["filter"] {
		p.Filter = &in.Filter
	}
	if present["transformation"] {
		p.Transformation = &in.Transformation
	}
	if present["status"] {
		p.Status = &in.Status
	}
	p.ReplayDeadLetters = in.ReplayDeadLetters
	if m := c.r.Header.Get("If-Match"); m != "" {
		v, err := strconv.Atoi(strings.Trim(strings.TrimPrefix(strings.TrimSpace(m), "W/"), `"`))
		if err != nil {
			return 0, nil, &webhookd.Error{Code: webhookd.CodeVersionMismatch, Message: "If-Match does not name a version of this endpoint"}
		}
		p.IfVersion = &v
	}
	e, job, err := c.store.UpdateEndpointAndReplay(c.ctx, c.project.ID, c.r.PathValue("id"), p, s.clock.Now())
	if err != nil {
		return 0, nil, err
	}
	c.header.Set("ETag", strconv.Quote(strconv.Itoa(e.Version)))
	if job != nil {
		// The replay job of the outage's dead letters: its progress at
		// GET /v1/jobs/{id}.
		c.header.Set("Webhookd-Replay-Job", job.ID)
		c.afterCommit = s.enqueueJobAfterCommit(job.ID)
	}
	return http.StatusOK, endpointOut(e), nil
}

// deleteEndpoint serves DELETE /v1/endpoints/{id}: 204.
func (s *Server) deleteEndpoint(c *call) (int, any, error) {
	if err := c.store.DeleteEndpoint(c.ctx, c.project.ID, c.r.PathValue("id"), s.clock.Now()); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// getSecret serves GET /v1/endpoints/{id}/secret.
func (s *Server) getSecret(c *call) (int, any, error) {
	e, err := c.store.GetEndpoint(c.ctx, c.project.ID, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, secretOut(e, s.clock.Now()), nil
}

// rotateSecret serves POST /v1/endpoints/{id}/rotate-secret.
func (s *Server) rotateSecret(c *call) (int, any, error) {
	if len(strings.TrimSpace(string(c.body))) > 0 {
		if _, err := decodeObject(c.body, "", map[string]any{}); err != nil {
			return 0, nil, err
		}
	}
	secret, err := newSecret()
	if err != nil {
		return 0, nil, err
	}
	now := s.clock.Now()
	e, err := c.store.RotateSecret(c.ctx, c.project.ID, c.r.PathValue("id"), secret, now)
	if err != nil {
		return 0, nil, err
	}
	c.secret = true
	return http.StatusOK, secretOut(e, now), nil
}

// pageOf reads ?limit= (1–100, default 50) and ?cursor=.
func pageOf(r *http.Request) (storage.Page, error) {
	page := storage.Page{Limit: 50}
	q := r.URL.Query()
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return page, webhookd.Invalid("limit", "must be an integer from 1 to 100")
		}
		page.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		id, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(id) == 0 || textProblem(string(id)) != "" {
			return page, webhookd.Invalid("cursor", "is not a cursor this API returned")
		}
		page.Cursor = string(id)
	}
	return page, nil
}

// cursorAfter is the opaque cursor continuing after id.
func cursorAfter(id string) *string {
	c := base64.RawURLEncoding.EncodeToString([]byte(id))
	return &c
}

// testFilter serves POST /v1/endpoints/{id}/filter/test: whether the
// endpoint's filter matches an event, a past one ({"event_id"}) or one
// given ({"type","data"}), without sending anything. {"filter"} beside
// them tries a filter before it is saved. It answers {"match": bool}.
func (s *Server) testFilter(c *call) (int, any, error) {
	var (
		eventID, typ string
		data, flt    json.RawMessage
	)
	present, err := decodeObject(c.body, "", map[string]any{"event_id": &eventID, "type": &typ, "data": &data, "filter": &flt})
	if err != nil {
		return 0, nil, err
	}
	ep, err := c.store.GetEndpoint(c.ctx, c.project.ID, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if present["filter"] {
		if ep.Filter, err = checkFilter(flt); err != nil {
			return 0, nil, err
		}
	}
	switch {
	case present["event_id"] && (present["type"] || present["data"]):
		return 0, nil, webhookd.Invalid("event_id", "give an event_id, or a type and data, not both")
	case present["event_id"]:
		ev, err := c.store.GetEvent(c.ctx, c.project.ID, eventID)
		if err != nil {
			return 0, nil, err
		}
		typ, data = ev.Type, ev.Data
	case !present["type"]:
		return 0, nil, webhookd.Invalid("type", "is required (or an event_id)")
	}
	f, err := filter.Compile(ep.Filter)
	if err != nil {
		return 0, nil, err // stored only once checked
	}
	return http.StatusOK, map[string]bool{"match": f.Match(typ, data)}, nil
}

// transformationTestJSON is what POST /v1/endpoints/{id}/transformation/test
// answers: the request that would be sent, or send false (canceled).
type transformationTestJSON struct {
	Send    bool              `json:"send"`
	URL     *string           `json:"url"`
	Headers map[string]string `json:"headers"`
	Body    *string           `json:"body"`
}

// testTransformation serves POST /v1/endpoints/{id}/transformation/test:
// the request the endpoint's transformation makes of an event, a past one
// ({"event_id"}) or one given ({"type","data"}), without sending anything.
// {"transformation"} beside them tries one before it is saved (null: none).
// An endpoint without one shows the request as webhookd makes it. A script
// that fails is 400 validation_failed with its error.
func (s *Server) testTransformation(c *call) (int, any, error) {
	var (
		eventID, typ string
		data         json.RawMessage
		src          *string
	)
	present, err := decodeObject(c.body, "", map[string]any{"event_id": &eventID, "type": &typ, "data": &data,
		"transformation": &src})
	if err != nil {
		return 0, nil, err
	}
	ep, err := c.store.GetEndpoint(c.ctx, c.project.ID, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if present["transformation"] {
		ep.Transformation = src
	}
	ev := webhookd.Event{ID: "evt_preview", ProjectID: c.project.ID, Type: typ, Data: data, CreatedAt: s.clock.Now()}
	switch {
	case present["event_id"] && (present["type"] || present["data"]):
		return 0, nil, webhookd.Invalid("event_id", "give an event_id, or a type and data, not both")
	case present["event_id"]:
		if ev, err = c.store.GetEvent(c.ctx, c.project.ID, eventID); err != nil {
			return 0, nil, err
		}
	case !present["type"]:
		return 0, nil, webhookd.Invalid("type", "is required (or an event_id)")
	case !eventTypePattern.MatchString(typ):
		return 0, nil, webhookd.Invalid("type", "must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
	case len(ev.Data) == 0:
		ev.Data = json.RawMessage("null")
	}
	out, err := s.previewTransformation(c.ctx, ep, ev)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}

// previewTransformation runs ep's transformation on ev as a delivery
// would, keyed apart from the workers' runs.
func (s *Server) previewTransformation(ctx context.Context, ep webhookd.Endpoint, ev webhookd.Event) (transformationTestJSON, error) {
	w, err := transform.WebhookOf(ep.URL, ev)
	if err != nil {
		return transformationTestJSON{}, err
	}
	res := transform.Result{URL: w.URL, Headers: w.Headers, Body: w.Payload}
	if ep.Transformation != nil {
		if strings.TrimSpace(*ep.Transformation) == "" {
			return transformationTestJSON{}, webhookd.Invalid("transformation", "must be JavaScript that defines function handler(webhook), or null for none")
		}
		if res, err = s.transforms.Run(ctx, "preview:"+ep.ID, *ep.Transformation, w); err != nil {
			return transformationTestJSON{}, transformationInvalid(err)
		}
	}
	if res.Cancel {
		return transformationTestJSON{Headers: map[string]string{}}, nil
	}
	body := string(res.Body)
	res.Headers["content-type"] = "application/json"
	return transformationTestJSON{Send: true, URL: &res.URL, Headers: res.Headers, Body: &body}, nil
}
