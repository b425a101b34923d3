package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// EventWriter accepts events that come by another way than an HTTP
// request (the outbox relay) through the event write path of
// POST /v1/events, as data rather than as a path of its own: each event is
// the body of such a request under its own Idempotency-Key, parsed and
// limited as the route parses it, checked against the catalog's schemas,
// written by the same Ingester (external_id, fan-out to the subscribed
// endpoints or to endpoint_ids, the key's record with the response in one
// transaction), and its deliveries handed to the queue after the commit.
type EventWriter struct {
	s *Server // the parts of a Server the write path uses: no routes, limiter or listener
}

// EventWriterConfig configures an EventWriter. Only DB is required.
type EventWriterConfig struct {
	DB       *storage.DB
	Enqueuer webhookd.Enqueuer // hands new deliveries to the queue; nil: the reconciler enqueues them
	Logger   *slog.Logger      // default slog.Default()
	// MaxPayloadBytes caps each event's data, as the API's setting of the
	// same name does (default 64 KiB).
	MaxPayloadBytes int64
}

// NewEventWriter returns an EventWriter.
func NewEventWriter(cfg EventWriterConfig) *EventWriter {
	c := Config{DB: cfg.DB, Enqueuer: cfg.Enqueuer, Logger: cfg.Logger, MaxPayloadBytes: cfg.MaxPayloadBytes}.WithDefaults()
	s := &Server{cfg: c, db: c.DB, log: c.Logger, clock: c.Clock, eventChecker: newEventChecker(c.DB, c.MaxPayloadBytes),
		ingester: c.DB.NewIngester(c.IngestGroups)}
	return &EventWriter{s: s}
}

// KeyedEvent is one event for an EventWriter.
type KeyedEvent struct {
	Key  string // its Idempotency-Key in the project, at most 255 characters
	Body []byte // the event as a POST /v1/events body: {"type","data","external_id"?,"endpoint_ids"?}
}

// Written is what an EventWriter did with one event.
type Written struct {
	EventID  string          // the event accepted under the key; "" when refused
	Replayed bool            // the key had its outcome already: nothing was written now
	Refused  *webhookd.Error // the client error the event got (remembered under its key); nil when accepted
}

// Write accepts evs into project, in their order as far as the write path
// keeps it (they are queued together, IngestAll). Each event's outcome is
// decided once for its key: a repeat of a key gets the stored outcome and
// writes nothing (Replayed), so writing an event twice makes one event. An
// event refused as a client error (validation_failed, external_id_taken,
// payload_too_large, idempotency_key_mismatch, ...) is a Written with
// Refused, remembered like the route's 4xx. Any other failure (PostgreSQL
// down, a key busy past the wait) is Write's error: the events whose
// outcome committed replay it when written again.
func (w *EventWriter) Write(ctx context.Context, project webhookd.Project, evs []KeyedEvent) ([]Written, error) {
	s := w.s
	now := s.clock.Now()
	reqs := make([]storage.IngestRequest, len(evs))
	for i, e := range evs {
		reqs[i] = s.outboxRequest(ctx, project, e, now)
	}
	results, errs := s.ingester.IngestAll(ctx, reqs, s.cfg.IdempotencyWait)
	out := make([]Written, len(evs))
	var fresh []webhookd.Event
	var first error
	for i, res := range results {
		if err := errs[i]; err != nil {
			if ae := appError(err); ae.Code != webhookd.CodeInternal && clientError(ae.Code) {
				out[i].Refused = ae // a key reused with another body
				continue
			}
			if first == nil {
				first = fmt.Errorf("event %d: %w", i, err)
			}
			continue
		}
		fresh = append(fresh, res.Events...)
		out[i] = written(res)
	}
	if len(fresh) > 0 {
		s.enqueueAfterCommit(ctx, now, fresh)
	}
	return out, first
}

// outboxRequest is e as the one event of a POST /v1/events request: parsed
// and checked against the catalog as the route does, its client error
// (Invalid) remembered under its key.
func (s *Server) outboxRequest(ctx context.Context, project webhookd.Project, e KeyedEvent, now time.Time) storage.IngestRequest {
	ik := storage.IdempotencyKey{ProjectID: project.ID, Key: e.Key, TTL: project.IdempotencyTTL,
		Fingerprint: fingerprint(http.MethodPost, "/v1/events", e.Body)}
	evs, invalid := s.parseEvents(e.Body, false)
	if invalid == nil {
		if err := s.validateEvents(ctx, project.ID, evs, fieldPrefixer(false)); err != nil {
			invalid = err // a catalog that cannot be read fails the request below, unremembered
		}
	}
	requestID := storage.NewRequestID()
	return storage.IngestRequest{Key: ik, Events: evs, Invalid: invalid, Now: now, FieldPrefix: fieldPrefixer(false),
		Render: func(out []webhookd.Event, err error) (storage.StoredResponse, error) {
			if err != nil {
				if ae := appError(err); !clientError(ae.Code) {
					return storage.StoredResponse{}, err
				}
				status, body := errorResponse(appError(err), requestID)
				return storage.StoredResponse{StatusCode: status, ContentType: "application/json", Body: body}, nil
			}
			body, err := marshalJSON(eventsOut(out, false))
			return storage.StoredResponse{StatusCode: http.StatusAccepted, ContentType: "application/json", Body: body}, err
		}}
}

// clientError reports whether code is a client error that is remembered
// for its key (SPEC §2: 4xx but 429; a key in progress is not an outcome).
func clientError(code string) bool {
	st := statusOf(code)
	return st >= 400 && st < 500 && st != http.StatusTooManyRequests && code != webhookd.CodeIdempotencyKeyInProgress
}

// written reads an event request's outcome from its response, stored or
// new.
func written(res storage.IngestResult) Written {
	w := Written{Replayed: res.Replayed}
	if res.Response.StatusCode == http.StatusAccepted {
		var ev struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(res.Response.Body, &ev) == nil {
			w.EventID = ev.ID
		}
		return w
	}
	var e errorJSON
	_ = json.Unmarshal(res.Response.Body, &e)
	w.Refused = &webhookd.Error{Code: e.Error.Code, Message: e.Error.Message, Field: e.Error.Field, ExistingID: e.Error.ExistingID}
	if w.Refused.Code == "" {
		w.Refused.Code, w.Refused.Message = webhookd.CodeValidationFailed, fmt.Sprintf("refused with status %d", res.Response.StatusCode)
	}
	return w
}

// enqueueAfterCommit hands committed deliveries to the queue, bounded by
// enqueueDeadline; a failure only delays them until the reconciler's pass.
func (s *Server) enqueueAfterCommit(ctx context.Context, now time.Time, evs []webhookd.Event) {
	if s.cfg.Enqueuer == nil {
		return
	}
	due := webhookd.Scheduled(evs, now)
	if len(due) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), enqueueDeadline)
	defer cancel()
	if err := s.cfg.Enqueuer.Enqueue(ctx, due...); err != nil {
		s.log.WarnContext(ctx, "cannot hand new deliveries to redis; the reconciler will enqueue them",
			"deliveries", len(due), "err", err)
	}
}
