package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// MaxBatchEvents is the most events one batch may carry.
const MaxBatchEvents = 1000

var eventTypePattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// events serves POST /v1/events (batch false) and POST /v1/events/batch
// (all events or none): every event request goes through the Ingester,
// which claims its key, writes its events and remembers its response in a
// transaction shared with concurrent requests. A body that does not parse
// is remembered for its key as its 400.
func (s *Server) events(limit int64, batch bool) func(http.ResponseWriter, *http.Request, *call) {
	return func(w http.ResponseWriter, r *http.Request, c *call) {
		ik, ok := s.idempotencyKey(w, c, limit)
		if !ok {
			return
		}
		evs, invalid := s.parseEvents(c.body, batch)
		if invalid == nil {
			// The catalog's schemas, before anything is claimed or
			// written: a mismatch is the body's own client error.
			if err := s.validateEvents(c.ctx, c.project.ID, evs, fieldPrefixer(batch)); err != nil {
				if webhookd.ErrorCode(err) != webhookd.CodeValidationFailed {
					s.fail(w, c, err)
					return
				}
				invalid = err
			}
		}
		now := s.clock.Now()
		ctx, span := s.startWrite(c.ctx, evs)
		res, err := s.ingester.Ingest(ctx, storage.IngestRequest{Key: ik, Events: evs, Invalid: invalid, Now: now,
			FieldPrefix: fieldPrefixer(batch),
			Render: func(out []webhookd.Event, err error) (storage.StoredResponse, error) {
				if err != nil {
					status, body := errorResponse(appError(err), c.requestID)
					return storage.StoredResponse{StatusCode: status, ContentType: "application/json", Body: body}, nil
				}
				body, err := marshalJSON(eventsOut(out, batch))
				return storage.StoredResponse{StatusCode: http.StatusAccepted, ContentType: "application/json", Body: body}, err
			}}, s.cfg.IdempotencyWait)
		endWrite(span, res, err)
		if err != nil {
			s.failIdempotent(w, c, err)
			return
		}
		if res.Events != nil {
			c.afterCommit = func(ctx context.Context) { s.enqueue(ctx, now, res.Events) }
		}
		s.writeStored(w, c, res.Response, res.Replayed)
	}
}

// parseEvents validates the body of POST /v1/events, or of
// POST /v1/events/batch when batch is set.
func (s *eventChecker) parseEvents(body []byte, batch bool) ([]storage.NewEvent, error) {
	if !batch {
		ev, err := s.parseEvent(body, "")
		if err != nil {
			return nil, err
		}
		return []storage.NewEvent{ev}, nil
	}
	var items []json.RawMessage
	present, err := decodeObject(body, "", map[string]any{"events": &items})
	if err != nil {
		return nil, err
	}
	switch {
	case !present["events"] || items == nil:
		return nil, webhookd.Invalid("events", "is required")
	case len(items) == 0:
		return nil, webhookd.Invalid("events", "must hold at least one event")
	case len(items) > MaxBatchEvents:
		return nil, webhookd.Invalid("events", "must hold at most %d events", MaxBatchEvents)
	}
	evs := make([]storage.NewEvent, len(items))
	seen := make(map[string]int)
	for i, raw := range items {
		prefix := fmt.Sprintf("events[%d].", i)
		if evs[i], err = s.parseEvent(raw, prefix); err != nil {
			return nil, err
		}
		if x := evs[i].ExternalID; x != nil {
			if j, dup := seen[*x]; dup {
				return nil, webhookd.Invalid(prefix+"external_id", "repeats events[%d].external_id", j)
			}
			seen[*x] = i
		}
	}
	return evs, nil
}

// eventsOut is the answer to an accepted event request.
func eventsOut(evs []webhookd.Event, batch bool) any {
	if !batch {
		return eventOut(evs[0])
	}
	list := make([]eventJSON, len(evs))
	for i, e := range evs {
		list[i] = eventOut(e)
	}
	return map[string]any{"data": list}
}

// fieldPrefixer names event i's place in error fields: events[i]. in a
// batch, nothing for a single event.
func fieldPrefixer(batch bool) func(int) string {
	return func(i int) string {
		if !batch {
			return ""
		}
		return fmt.Sprintf("events[%d].", i)
	}
}

// enqueueDeadline bounds handing a request's deliveries to the queue: a
// slow Redis delays them until the reconciler's next pass, never the API.
const enqueueDeadline = 2 * time.Second

// enqueue hands new deliveries to the queue. A failure only delays them:
// they are in PostgreSQL, and the reconciler enqueues what is due. While
// Redis does not answer, the gate lets one request a second try (and wait
// up to enqueueDeadline); the others leave their deliveries to the
// reconciler at once.
func (s *Server) enqueue(ctx context.Context, now time.Time, evs []webhookd.Event) {
	if s.cfg.Enqueuer == nil {
		return
	}
	due := webhookd.Scheduled(evs, now)
	if len(due) == 0 {
		return
	}
	if !s.handoff.try(time.Now()) {
		s.deferred.Add(float64(len(due)))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, enqueueDeadline)
	defer cancel()
	if err := s.cfg.Enqueuer.Enqueue(ctx, due...); err != nil {
		s.deferred.Add(float64(len(due)))
		if s.handoff.failed(time.Now()) {
			s.log.WarnContext(ctx, "cannot hand new deliveries to redis; the reconciler will enqueue them", "deliveries", len(due), "err", err)
		}
		return
	}
	s.handoff.succeeded()
}

// parseEvent validates one event object; prefix names its place in a batch.
func (s *eventChecker) parseEvent(body []byte, prefix string) (storage.NewEvent, error) {
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
	if strings.HasPrefix(typ, webhookd.ReservedTypePrefix) {
		return ev, webhookd.Invalid(prefix+"type", "types beginning with %q are webhookd's own (operational events)", webhookd.ReservedTypePrefix)
	}
	if !present["data"] {
		return ev, webhookd.Invalid(prefix+"data", "is required (any JSON value)")
	}
	data = compactJSON(data)
	if int64(len(data)) > s.maxPayload {
		return ev, &webhookd.Error{Code: webhookd.CodePayloadTooLarge, Field: prefix + "data",
			Message: fmt.Sprintf("%sdata is larger than %d bytes", prefix, s.maxPayload)}
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

// startWrite begins the span of an event request's write, a child of the
// request's, and sets each event's TraceParent to it: the attempts of
// their deliveries are its children (dispatcher). Off, it does nothing.
func (s *Server) startWrite(ctx context.Context, evs []storage.NewEvent) (context.Context, trace.Span) {
	if !s.cfg.Tracer.On() {
		return ctx, noop.Span{}
	}
	ctx, span := s.cfg.Tracer.Start(ctx, "webhookd.event.write", trace.SpanKindInternal,
		attribute.Int("webhookd.events.count", len(evs)))
	tp := s.cfg.Tracer.TraceParent(ctx)
	for i := range evs {
		evs[i].TraceParent = tp
	}
	return ctx, span
}

// endWrite ends a write's span with what it wrote: the event's id (the
// first event's in a batch), or the stored response it replayed, or its
// error.
func endWrite(span trace.Span, res storage.IngestResult, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case res.Replayed:
		span.SetAttributes(attribute.Bool("webhookd.idempotent_replayed", true))
	case len(res.Events) > 0:
		span.SetAttributes(attribute.String("webhookd.event.id", res.Events[0].ID))
	}
	span.End()
}
