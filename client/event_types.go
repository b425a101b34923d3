package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/url"
	"time"
)

// NewEventType is an entry to add to the project's event-type catalog.
type NewEventType struct {
	Name        string `json:"name"` // the event type rules: 1–128 characters of [A-Za-z0-9._:-]
	Description string `json:"description,omitempty"`
	// Schema is a JSON Schema (draft 2020-12 unless it says otherwise);
	// Example is data checked against it. Nil: none. A json.RawMessage is
	// sent as is, anything else encoded with encoding/json.
	Schema  any `json:"schema,omitempty"`
	Example any `json:"example,omitempty"`
	// Validate makes the API refuse events of the type whose data does not
	// match the schema (ErrValidationFailed naming the failing path).
	Validate bool `json:"validate,omitempty"`
}

// EventType is an entry of the catalog. Schema and Example are JSON null
// when the entry has none.
type EventType struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Example     json.RawMessage `json:"example"`
	Validate    bool            `json:"validate"`
	Archived    bool            `json:"archived"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

// EventTypePatch changes the fields that are set. ClearSchema and
// ClearExample remove those.
type EventTypePatch struct {
	Description  *string
	Schema       any
	ClearSchema  bool
	Example      any
	ClearExample bool
	Validate     *bool
	Archived     *bool
}

// MarshalJSON sends only the fields that change (and null for a clear).
func (p EventTypePatch) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	if p.Description != nil {
		m["description"] = *p.Description
	}
	for _, f := range []struct {
		name  string
		v     any
		clear bool
	}{{"schema", p.Schema, p.ClearSchema}, {"example", p.Example, p.ClearExample}} {
		switch {
		case f.clear:
			m[f.name] = nil
		case f.v != nil:
			m[f.name] = f.v
		}
	}
	if p.Validate != nil {
		m["validate"] = *p.Validate
	}
	if p.Archived != nil {
		m["archived"] = *p.Archived
	}
	return json.Marshal(m)
}

func eventTypePath(name string) string { return "/v1/event-types/" + url.PathEscape(name) }

// CreateEventType adds an entry to the catalog (POST /v1/event-types).
// Errors: ErrValidationFailed naming the field (a schema that does not
// compile, an example that does not match it, a name taken).
func (c *Client) CreateEventType(ctx context.Context, t NewEventType, opts ...CallOption) (*EventType, error) {
	r, err := post("/v1/event-types", t, opts)
	if err != nil {
		return nil, err
	}
	var out EventType
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// EventTypes lists the catalog by name, following cursors (GET
// /v1/event-types); archived entries too when archived is set.
func (c *Client) EventTypes(ctx context.Context, archived bool, pageSize int) iter.Seq2[EventType, error] {
	q := url.Values{}
	setLimit(q, pageSize)
	if archived {
		q.Set("archived", "true")
	}
	return list[EventType](ctx, c, "/v1/event-types", q)
}

// EventType reads one entry, archived or not (GET /v1/event-types/{name}).
func (c *Client) EventType(ctx context.Context, name string) (*EventType, error) {
	var out EventType
	if err := c.do(ctx, newRequest("GET", eventTypePath(name), nil), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateEventType changes an entry (PATCH /v1/event-types/{name}).
func (c *Client) UpdateEventType(ctx context.Context, name string, p EventTypePatch) (*EventType, error) {
	r := newRequest(http.MethodPatch, eventTypePath(name), nil)
	if err := r.setBody(p); err != nil {
		return nil, err
	}
	var out EventType
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ArchiveEventType archives an entry (DELETE /v1/event-types/{name}): its
// name stays taken and its events are no longer checked.
func (c *Client) ArchiveEventType(ctx context.Context, name string) (*EventType, error) {
	var out EventType
	if err := c.do(ctx, newRequest(http.MethodDelete, eventTypePath(name), nil), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PortalSession is a one-time link into the portal.
type PortalSession struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// CreatePortalSession makes a one-time link into the integrators' portal
// for the key's project (POST /v1/portal-sessions), valid for ttl (0: the
// API's default, 15 minutes; at most 24 hours).
func (c *Client) CreatePortalSession(ctx context.Context, ttl time.Duration, opts ...CallOption) (*PortalSession, error) {
	body := map[string]any{}
	if ttl > 0 {
		body["ttl"] = ttl.String()
	}
	r, err := post("/v1/portal-sessions", body, opts)
	if err != nil {
		return nil, err
	}
	var out PortalSession
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
