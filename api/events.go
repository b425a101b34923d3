package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// MaxBatchEvents is the most events one batch may carry.
const MaxBatchEvents = 1000

var eventTypePattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// createEvent serves POST /v1/events.
func (s *Server) createEvent(c *call) (int, any, error) {
	ev, err := s.parseEvent(c.body, "")
	if err != nil {
		return 0, nil, err
	}
	evs, err := s.ingest(c, []storage.NewEvent{ev}, false)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, eventOut(evs[0]), nil
}

// createEventBatch serves POST /v1/events/batch: all events or none.
func (s *Server) createEventBatch(c *call) (int, any, error) {
	var items []json.RawMessage
	present, err := decodeObject(c.body, "", map[string]any{"events": &items})
	if err != nil {
		return 0, nil, err
	}
	switch {
	case !present["events"] || items == nil:
		return 0, nil, webhookd.Invalid("events", "is required")
	case len(items) == 0:
		return 0, nil, webhookd.Invalid("events", "must hold at least one event")
	case len(items) > MaxBatchEvents:
		return 0, nil, webhookd.Invalid("events", "must hold at most %d events", MaxBatchEvents)
	}
	evs := make([]storage.NewEvent, len(items))
	seen := make(map[string]int)
	for i, raw := range items {
		prefix := fmt.Sprintf("events[%d].", i)
		if evs[i], err = s.parseEvent(raw, prefix); err != nil {
			return 0, nil, err
		}
		if x := evs[i].ExternalID; x != nil {
			if j, dup := seen[*x]; dup {
				return 0, nil, webhookd.Invalid(prefix+"external_id", "repeats events[%d].external_id", j)
			}
			seen[*x] = i
		}
	}
	out, err := s.ingest(c, evs, true)
	if err != nil {
		return 0, nil, err
	}
	list := make([]eventJSON, len(out))
	for i, e := range out {
		list[i] = eventOut(e)
	}
	return http.StatusAccepted, map[string]any{"data": list}, nil
}

// ingest writes the events and, after the response commits, hands their
// deliveries to the queue.
// In a batch, fields are named events[i].field.
func (s *Server) ingest(c *call, evs []storage.NewEvent, batch bool) ([]webhookd.Event, error) {
	now := s.clock.Now()
	out, err := c.store.CreateEvents(c.ctx, c.project.ID, evs, now, func(i int) string {
		if !batch {
			return ""
		}
		return fmt.Sprintf("events[%d].", i)
	})
	if err != nil {
		return nil, err
	}
	c.afterCommit = func(ctx context.Context) { s.enqueue(ctx, now, out) }
	return out, nil
}

// enqueueDeadline bounds handing a request's deliveries to the queue: a
// slow Redis delays them until the reconciler's next pass, never the API.
const enqueueDeadline = 2 * time.Second

// enqueue hands new deliveries to the queue. A failure only delays them:
// they are in PostgreSQL, and the reconciler enqueues what is due.
func (s *Server) enqueue(ctx context.Context, now time.Time, evs []webhookd.Event) {
	if s.cfg.Enqueuer == nil {
		return
	}
	var due []webhookd.ScheduledDelivery
	for _, e := range evs {
		for _, d := range e.Deliveries {
			due = append(due, webhookd.ScheduledDelivery{ID: d.ID, EndpointID: d.EndpointID, DueAt: now})
		}
	}
	if len(due) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, enqueueDeadline)
	defer cancel()
	if err := s.cfg.Enqueuer.Enqueue(ctx, due...); err != nil {
		s.log.Warn("enqueue after ingest failed; the reconciler will pick the deliveries up", "deliveries", len(due), "err", err)
	}
}

// parseEvent validates one event object; prefix names its place in a batch.
func (s *Server) parseEvent(body []byte, prefix string) (storage.NewEvent, error) {
	var (
		ev   storage.NewEvent
		typ  string
		data json.RawMessage
	)
	present, err := decodeObject(body, prefix, map[string]any{
		"type": &typ, "data": &data, "external_id": &ev.ExternalID, "endpoint_ids": &ev.EndpointIDs,
	})
	if err != nil {
		return ev, err
	}
	if !present["type"] {
		return ev, webhookd.Invalid(prefix+"type", "is required")
	}
	if !eventTypePattern.MatchString(typ) {
		return ev, webhookd.Invalid(prefix+"type", "must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
	}
	if !present["data"] {
		return ev, webhookd.Invalid(prefix+"data", "is required (any JSON value)")
	}
	data = compactJSON(data)
	if int64(len(data)) > s.cfg.MaxPayloadBytes {
		return ev, &webhookd.Error{Code: webhookd.CodePayloadTooLarge, Field: prefix + "data",
			Message: fmt.Sprintf("%sdata is larger than %d bytes", prefix, s.cfg.MaxPayloadBytes)}
	}
	if x := ev.ExternalID; x != nil && (len(*x) == 0 || len(*x) > 255) {
		return ev, webhookd.Invalid(prefix+"external_id", "must be 1 to 255 characters")
	}
	for i, id := range ev.EndpointIDs {
		if id == "" {
			return ev, webhookd.Invalid(fmt.Sprintf("%sendpoint_ids[%d]", prefix, i), "must not be empty")
		}
	}
	ev.Type, ev.Data = typ, data
	return ev, nil
}

// getEvent serves GET /v1/events/{id}.
func (s *Server) getEvent(c *call) (int, any, error) {
	e, err := c.store.GetEvent(c.ctx, c.project.ID, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, eventOut(e), nil
}
