package api

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/outbox"
)

// OutboxWriter is the outbox relay's outbox.Writer: each row as the body
// of a POST /v1/events request in the source's project, written by an
// EventWriter.
type OutboxWriter struct{ W *EventWriter }

var _ outbox.Writer = OutboxWriter{}

// outboxEvent is a row as an event request's body.
type outboxEvent struct {
	Type        string          `json:"type"`
	Data        json.RawMessage `json:"data"`
	ExternalID  *string         `json:"external_id,omitempty"`
	EndpointIDs *[]string       `json:"endpoint_ids,omitempty"` // NULL: absent; '{}': as the route takes []
}

// Write writes rows into the project named project. An unknown project is
// its error (not_found): the rows wait in their source.
func (o OutboxWriter) Write(ctx context.Context, project string, keys []string, rows []outbox.Row) ([]*webhookd.Error, error) {
	p, err := o.W.s.db.Store().ProjectByName(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("project %q: %w", project, err)
	}
	evs := make([]KeyedEvent, len(rows))
	for i, r := range rows {
		ev := outboxEvent{Type: r.Type, Data: r.Data, ExternalID: r.ExternalID}
		if r.EndpointIDs != nil {
			ev.EndpointIDs = &r.EndpointIDs
		}
		body, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", r.ID, err)
		}
		evs[i] = KeyedEvent{Key: keys[i], Body: body}
	}
	ws, err := o.W.Write(ctx, p, evs)
	if err != nil {
		return nil, err
	}
	out := make([]*webhookd.Error, len(ws))
	for i, w := range ws {
		out[i] = w.Refused
	}
	return out, nil
}
