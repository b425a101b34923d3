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

type listJSON[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
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
	ID                 string   `json:"id"`
	URL                string   `json:"url"`
	Description        string   `json:"description"`
	EventTypes         []string `json:"event_types"`
	Status             string   `json:"status"`
	DisabledReason     *string  `json:"disabled_reason"`
	RateLimitPerSecond *int     `json:"rate_limit_per_second"`
	Version            int      `json:"version"`
	CreatedAt          string   `json:"created_at"`
	UpdatedAt          string   `json:"updated_at"`
}

func endpointOut(e webhookd.Endpoint) endpointJSON {
	types := e.EventTypes
	if types == nil {
		types = []string{}
	}
	return endpointJSON{ID: e.ID, URL: e.URL, Description: e.Description, EventTypes: types, Status: e.Status,
		DisabledReason: e.DisabledReason, RateLimitPerSecond: e.RateLimitPerSecond, Version: e.Version,
		CreatedAt: timeString(e.CreatedAt), UpdatedAt: timeString(e.UpdatedAt)}
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
