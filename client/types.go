package client

import (
	"encoding/json"
	"time"
)

// The resources of SPEC §2 "Resource shapes". Times are UTC; values the API
// sends as null are nil pointers.

// NewEvent is one event to send.
type NewEvent struct {
	Type string `json:"type"` // 1–128 characters of [A-Za-z0-9._:-]
	// Data is any JSON value: a json.RawMessage is sent as is, anything
	// else is encoded with encoding/json.
	Data any `json:"data"`
	// ExternalID, when set, is unique per project: a second event with it
	// fails with ErrExternalIDTaken (Error.ExistingID names the first).
	ExternalID string `json:"external_id,omitempty"`
	// EndpointIDs, when set, limits the event to these endpoints.
	EndpointIDs []string `json:"endpoint_ids,omitempty"`
}

// Event is an accepted event and its deliveries.
type Event struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Data       json.RawMessage `json:"data"`
	ExternalID *string         `json:"external_id"`
	CreatedAt  time.Time       `json:"created_at"`
	Deliveries []DeliveryRef   `json:"deliveries"`
}

// DeliveryRef is a delivery as an Event lists it.
type DeliveryRef struct {
	ID         string `json:"id"`
	EndpointID string `json:"endpoint_id"`
	Status     string `json:"status"`
}

// Delivery statuses.
const (
	StatusPending    = "pending"
	StatusRetrying   = "retrying"
	StatusSucceeded  = "succeeded"
	StatusDeadLetter = "dead_letter"
	StatusCanceled   = "canceled" // its endpoint's transformation canceled it: no attempt
)

// NewEndpoint is an endpoint to create.
type NewEndpoint struct {
	URL                string   `json:"url"` // absolute http(s) URL
	Description        string   `json:"description,omitempty"`
	EventTypes         []string `json:"event_types,omitempty"`           // none: every type
	RateLimitPerSecond *int     `json:"rate_limit_per_second,omitempty"` // nil: no limit
	MaxInFlight        *int     `json:"max_in_flight,omitempty"`         // nil: the worker's default
	Ordering           string   `json:"ordering,omitempty"`              // "fifo": one at a time, in order; "" or "none": concurrent
	// Filter narrows the events of its types it gets: a JSON object of
	// conditions, as {"data.status": "shipped", "data.total": {"$gt": 100}}
	// (SPEC §3); nil: every event of its types.
	Filter json.RawMessage `json:"filter,omitempty"`
	// Transformation reshapes each request: JavaScript that defines
	// function handler(webhook) and returns the webhook ({method, url,
	// headers, payload}) changed, or with cancel: true (SPEC §3); nil: none.
	Transformation *string `json:"transformation,omitempty"`
}

// Endpoint is a receiver of webhooks.
type Endpoint struct {
	ID                 string          `json:"id"`
	URL                string          `json:"url"`
	Description        string          `json:"description"`
	EventTypes         []string        `json:"event_types"`
	Status             string          `json:"status"`          // "active" or "disabled"
	DisabledReason     *string         `json:"disabled_reason"` // "manual" or "gone" while disabled
	RateLimitPerSecond *int            `json:"rate_limit_per_second"`
	MaxInFlight        *int            `json:"max_in_flight"`
	Ordering           string          `json:"ordering"`       // "none" or "fifo"
	Filter             json.RawMessage `json:"filter"`         // null: none
	Transformation     *string         `json:"transformation"` // nil: none
	Circuit            string          `json:"circuit"`        // "closed", "open" or "probing"
	Version            int             `json:"version"`
	CreatedAt          time.Time       `json:"created_at"`
	UpdatedAt          time.Time       `json:"updated_at"`
	// Secret is set only by CreateEndpoint; read it later with
	// EndpointSecret.
	Secret string `json:"secret,omitempty"`
}

// EndpointPatch changes an endpoint: nil fields stay as they are.
type EndpointPatch struct {
	URL         *string
	Description *string
	EventTypes  *[]string // an empty list: every type
	// RateLimitPerSecond sets the limit; ClearRateLimit removes it.
	RateLimitPerSecond *int
	ClearRateLimit     bool
	// MaxInFlight sets the per-worker cap; ClearMaxInFlight returns to the
	// worker's default.
	MaxInFlight      *int
	ClearMaxInFlight bool
	Ordering         *string // "none" or "fifo": for events accepted from then on
	// Filter replaces the filter; ClearFilter removes it.
	Filter      json.RawMessage
	ClearFilter bool
	// Transformation replaces the transformation; ClearTransformation
	// removes it.
	Transformation      *string
	ClearTransformation bool
	Status              *string // "active" or "disabled"
	// ReplayDeadLetters, with Status "active" on a disabled endpoint, also
	// replays its dead letters of the outage in one job.
	ReplayDeadLetters bool
}

// MarshalJSON sends only the fields that change (and null for a clear).
func (p EndpointPatch) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	set := func(name string, v any, present bool) {
		if present {
			m[name] = v
		}
	}
	set("url", p.URL, p.URL != nil)
	set("description", p.Description, p.Description != nil)
	set("event_types", p.EventTypes, p.EventTypes != nil)
	set("rate_limit_per_second", p.RateLimitPerSecond, p.RateLimitPerSecond != nil || p.ClearRateLimit)
	set("max_in_flight", p.MaxInFlight, p.MaxInFlight != nil || p.ClearMaxInFlight)
	set("ordering", p.Ordering, p.Ordering != nil)
	set("filter", p.Filter, p.Filter != nil || p.ClearFilter)
	set("transformation", p.Transformation, p.Transformation != nil || p.ClearTransformation)
	set("status", p.Status, p.Status != nil)
	set("replay_dead_letters", true, p.ReplayDeadLetters)
	return json.Marshal(m)
}

// Secret is an endpoint's signing secret ("whsec_" + base64), and the
// previous one while it still signs after a rotation.
type Secret struct {
	Secret            string     `json:"secret"`
	PreviousSecret    *string    `json:"previous_secret"`
	PreviousExpiresAt *time.Time `json:"previous_expires_at"`
}

// Delivery is one event's delivery to one endpoint. Attempts is filled by
// Delivery (one delivery), not by lists. WaitingReason says why a delivery
// that is not done waits until NextAttemptAt: "schedule", "endpoint_busy",
// "rate_limit", "circuit_open" or "fifo_turn" (webhookd.Waiting*); nil while
// nothing holds it back.
type Delivery struct {
	ID             string     `json:"id"`
	EventID        string     `json:"event_id"`
	EndpointID     string     `json:"endpoint_id"`
	EventType      string     `json:"event_type"`
	Status         string     `json:"status"`
	AttemptsCount  int        `json:"attempts_count"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	WaitingReason  *string    `json:"waiting_reason"`
	LastStatusCode *int       `json:"last_status_code"`
	LastError      *string    `json:"last_error"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	Attempts       []Attempt  `json:"attempts,omitempty"`
}

// Attempt is one HTTP request made for a delivery.
type Attempt struct {
	Number          int               `json:"number"`
	RequestID       string            `json:"request_id"`
	URL             string            `json:"url"`
	Trigger         string            `json:"trigger"` // auto, manual, test or inspector
	StatusCode      *int              `json:"status_code"`
	Error           *string           `json:"error"`
	DurationMS      int64             `json:"duration_ms"`
	StartedAt       time.Time         `json:"started_at"`
	RequestHeaders  map[string]string `json:"request_headers"`
	ResponseHeaders map[string]string `json:"response_headers"`
	ResponseBody    string            `json:"response_body"` // the first 8 KiB
	// TraceID is the OpenTelemetry trace the attempt was sent in (32 hex
	// digits), whose span the receiver's traceparent named; nil while
	// tracing was off.
	TraceID *string `json:"trace_id"`
}

// DeadLetter is a delivery that will not be retried on its own.
type DeadLetter struct {
	ID             string     `json:"id"`
	DeliveryID     string     `json:"delivery_id"`
	EventID        string     `json:"event_id"`
	EndpointID     string     `json:"endpoint_id"`
	EventType      string     `json:"event_type"`
	Reason         string     `json:"reason"` // exhausted, client_error, redirect or endpoint_disabled
	LastStatusCode *int       `json:"last_status_code"`
	DeadLetteredAt time.Time  `json:"dead_lettered_at"`
	ReplayedAt     *time.Time `json:"replayed_at"`
}

// Job is a background job: a dead-letter replay (kind
// "dead_letter_replay") or a bulk job (kind "event_bulk", whose Done counts
// the lines accepted and FailedCount those refused).
type Job struct {
	ID          string     `json:"id"`
	Kind        string     `json:"kind"`
	Status      string     `json:"status"` // queued, running, succeeded, failed or canceled
	Total       int        `json:"total"`
	Done        int        `json:"done"`
	FailedCount int        `json:"failed_count"`
	CreatedAt   time.Time  `json:"created_at"`
	FinishedAt  *time.Time `json:"finished_at"`
}

// Finished reports whether the job has stopped running.
func (j *Job) Finished() bool {
	return j.Status == "succeeded" || j.Status == "failed" || j.Status == "canceled"
}

// DeliveryFilter selects deliveries; zero fields select everything.
type DeliveryFilter struct {
	Status     string // pending, retrying, succeeded or dead_letter
	EndpointID string
	EventType  string
	EventID    string
	Since      time.Time
	PageSize   int // 1–100 per request; default 50
}

// DeadLetterFilter selects dead letters, for listing and for replay; zero
// fields select everything.
type DeadLetterFilter struct {
	EndpointID string
	EventType  string
	Since      time.Time
	Until      time.Time
	PageSize   int // listing only: 1–100 per request; default 50
}

// TransformationTest is an event to try an endpoint's transformation on:
// a past one (EventID) or one given (Type and Data).
type TransformationTest struct {
	EventID string          `json:"event_id,omitempty"`
	Type    string          `json:"type,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	// Transformation, when set, is tried instead of the endpoint's (before
	// saving it); Untransformed tries none, showing the request as
	// webhookd makes it.
	Transformation *string `json:"-"`
	Untransformed  bool    `json:"-"`
}

// MarshalJSON sends transformation only when one is tried (null for
// Untransformed).
func (t TransformationTest) MarshalJSON() ([]byte, error) {
	type plain TransformationTest
	raw, err := json.Marshal(plain(t))
	if err != nil || (t.Transformation == nil && !t.Untransformed) {
		return raw, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m["transformation"], err = json.Marshal(t.Transformation); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// TransformationResult is the request a transformation makes of an
// event: Send false when it cancels the delivery (URL and Body nil).
type TransformationResult struct {
	Send    bool              `json:"send"`
	URL     *string           `json:"url"`
	Headers map[string]string `json:"headers"` // lower-case; the signature's are made as it is sent
	Body    *string           `json:"body"`    // the JSON text that would be sent and signed
}
