package api

import (
	"encoding/json"
	"time"

	"github.com/webhookd/webhookd"
)

// The JSON shapes of SPEC §2 "Resource shapes". Absent values are null,
// never omitted.

func timeString(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func timePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := timeString(*t)
	return &s
}

// nullIfEmpty renders "" as null.
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

type listJSON[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

// pageOut renders one page of a list; more says a next page follows the
// last item, whose id makes the cursor.
func pageOut[T, J any](list []T, more bool, render func(T) J, id func(T) string) listJSON[J] {
	out := listJSON[J]{Data: make([]J, len(list))}
	for i, v := range list {
		out.Data[i] = render(v)
	}
	if more {
		out.NextCursor = cursorAfter(id(list[len(list)-1]))
	}
	return out
}

type deliveryRefJSON struct {
	ID         string `json:"id"`
	EndpointID string `json:"endpoint_id"`
	Status     string `json:"status"`
}

type eventJSON struct {
	ID         string            `json:"id"`
	Type       string            `json:"type"`
	Data       json.RawMessage   `json:"data"`
	ExternalID *string           `json:"external_id"`
	CreatedAt  string            `json:"created_at"`
	Deliveries []deliveryRefJSON `json:"deliveries"`
}

func eventOut(e webhookd.Event) eventJSON {
	out := eventJSON{ID: e.ID, Type: e.Type, Data: e.Data, ExternalID: e.ExternalID,
		CreatedAt: timeString(e.CreatedAt), Deliveries: make([]deliveryRefJSON, len(e.Deliveries))}
	for i, d := range e.Deliveries {
		out.Deliveries[i] = deliveryRefJSON(d)
	}
	return out
}

type endpointJSON struct {
	ID                 string          `json:"id"`
	URL                string          `json:"url"`
	Description        string          `json:"description"`
	EventTypes         []string        `json:"event_types"`
	Status             string          `json:"status"`
	DisabledReason     *string         `json:"disabled_reason"`
	RateLimitPerSecond *int            `json:"rate_limit_per_second"`
	MaxInFlight        *int            `json:"max_in_flight"`
	Ordering           string          `json:"ordering"`
	Filter             json.RawMessage `json:"filter"`
	Transformation     *string         `json:"transformation"`
	Circuit            string          `json:"circuit"`
	Version            int             `json:"version"`
	CreatedAt          string          `json:"created_at"`
	UpdatedAt          string          `json:"updated_at"`
}

func endpointOut(e webhookd.Endpoint) endpointJSON {
	types := e.EventTypes
	if types == nil {
		types = []string{}
	}
	return endpointJSON{ID: e.ID, URL: e.URL, Description: e.Description, EventTypes: types, Status: e.Status,
		DisabledReason: e.DisabledReason, RateLimitPerSecond: e.RateLimitPerSecond, MaxInFlight: e.MaxInFlight, Version: e.Version,
		Ordering: e.Ordering, Circuit: e.Circuit, Filter: filterOut(e.Filter),
		Transformation: e.Transformation,
		CreatedAt:      timeString(e.CreatedAt), UpdatedAt: timeString(e.UpdatedAt)}
}

// filterOut is an endpoint's filter as the API shows it: null for none.
func filterOut(f json.RawMessage) json.RawMessage {
	if len(f) == 0 {
		return json.RawMessage("null")
	}
	return f
}

// endpointWithSecretJSON is the create response: the endpoint and its secret.
type endpointWithSecretJSON struct {
	endpointJSON
	Secret string `json:"secret"`
}

type secretJSON struct {
	Secret            string  `json:"secret"`
	PreviousSecret    *string `json:"previous_secret"`
	PreviousExpiresAt *string `json:"previous_expires_at"`
}

// secretOut shows the previous secret only while it still signs.
func secretOut(e webhookd.Endpoint, now time.Time) secretJSON {
	out := secretJSON{Secret: e.Secret}
	if e.PreviousSecret != nil && e.PreviousExpiresAt != nil && e.PreviousExpiresAt.After(now) {
		out.PreviousSecret, out.PreviousExpiresAt = e.PreviousSecret, timePtr(e.PreviousExpiresAt)
	}
	return out
}

type deliveryJSON struct {
	ID             string  `json:"id"`
	EventID        string  `json:"event_id"`
	EndpointID     string  `json:"endpoint_id"`
	EventType      string  `json:"event_type"`
	Status         string  `json:"status"`
	AttemptsCount  int     `json:"attempts_count"`
	NextAttemptAt  *string `json:"next_attempt_at"`
	WaitingReason  *string `json:"waiting_reason"` // null while nothing holds it back
	LastStatusCode *int    `json:"last_status_code"`
	LastError      *string `json:"last_error"`
	CreatedAt      string  `json:"created_at"`
	UpdatedAt      string  `json:"updated_at"`
}

func deliveryOut(d webhookd.Delivery) deliveryJSON {
	return deliveryJSON{ID: d.ID, EventID: d.EventID, EndpointID: d.EndpointID, EventType: d.EventType, Status: d.Status,
		AttemptsCount: d.AttemptsCount, NextAttemptAt: timePtr(d.NextAttemptAt),
		WaitingReason: nullIfEmpty(d.WaitingReason), LastStatusCode: d.LastStatusCode, LastError: d.LastError, CreatedAt: timeString(d.CreatedAt), UpdatedAt: timeString(d.UpdatedAt)}
}

// deliveryWithAttemptsJSON is GET /v1/deliveries/{id}: the delivery and its
// attempts, oldest first.
type deliveryWithAttemptsJSON struct {
	deliveryJSON
	Attempts []attemptJSON `json:"attempts"`
}

type attemptJSON struct {
	Number          int               `json:"number"`
	RequestID       string            `json:"request_id"`
	URL             string            `json:"url"`
	Trigger         string            `json:"trigger"`
	StatusCode      *int              `json:"status_code"`
	Error           *string           `json:"error"`
	DurationMS      int64             `json:"duration_ms"`
	StartedAt       string            `json:"started_at"`
	RequestHeaders  map[string]string `json:"request_headers"`
	ResponseHeaders map[string]string `json:"response_headers"`
	ResponseBody    string            `json:"response_body"`
	TraceID         *string           `json:"trace_id"` // null when tracing was off
}

func attemptOut(a webhookd.Attempt) attemptJSON {
	out := attemptJSON{Number: a.Number, RequestID: a.RequestID, URL: a.URL, Trigger: a.Trigger, StatusCode: a.StatusCode,
		Error: a.Error, DurationMS: a.DurationMS, StartedAt: timeString(a.StartedAt), RequestHeaders: a.RequestHeaders,
		ResponseHeaders: a.ResponseHeaders, ResponseBody: a.ResponseBody}
	if a.TraceID != "" {
		out.TraceID = &a.TraceID
	}
	if out.RequestHeaders == nil {
		out.RequestHeaders = map[string]string{}
	}
	if out.ResponseHeaders == nil {
		out.ResponseHeaders = map[string]string{}
	}
	return out
}

type deadLetterJSON struct {
	ID             string  `json:"id"`
	DeliveryID     string  `json:"delivery_id"`
	EventID        string  `json:"event_id"`
	EndpointID     string  `json:"endpoint_id"`
	EventType      string  `json:"event_type"`
	Reason         string  `json:"reason"`
	LastStatusCode *int    `json:"last_status_code"`
	DeadLetteredAt string  `json:"dead_lettered_at"`
	ReplayedAt     *string `json:"replayed_at"`
}

func deadLetterOut(d webhookd.DeadLetter) deadLetterJSON {
	return deadLetterJSON{ID: d.ID, DeliveryID: d.DeliveryID, EventID: d.EventID, EndpointID: d.EndpointID,
		EventType: d.EventType, Reason: d.Reason, LastStatusCode: d.LastStatusCode,
		DeadLetteredAt: timeString(d.DeadLetteredAt), ReplayedAt: timePtr(d.ReplayedAt)}
}

type jobJSON struct {
	ID          string  `json:"id"`
	Kind        string  `json:"kind"`
	Status      string  `json:"status"`
	Total       int     `json:"total"`
	Done        int     `json:"done"`
	FailedCount int     `json:"failed_count"`
	CreatedAt   string  `json:"created_at"`
	FinishedAt  *string `json:"finished_at"`
}

func jobOut(j webhookd.Job) jobJSON {
	return jobJSON{ID: j.ID, Kind: j.Kind, Status: j.Status, Total: j.Total, Done: j.Done, FailedCount: j.FailedCount,
		CreatedAt: timeString(j.CreatedAt), FinishedAt: timePtr(j.FinishedAt)}
}

// jobCreatedJSON is the answer of POST /v1/dead-letters/replay.
type jobCreatedJSON struct {
	JobID string `json:"job_id"`
}

type errorJSON struct {
	Error errorBodyJSON `json:"error"`
}

type errorBodyJSON struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	RequestID  string `json:"request_id"`
	Field      string `json:"field,omitempty"`
	ExistingID string `json:"existing_id,omitempty"`
}
