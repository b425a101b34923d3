package storage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/filter"
)

// NewEvent is a validated event to ingest.
type NewEvent struct {
	Type        string
	Data        json.RawMessage
	ExternalID  *string
	EndpointIDs []string // when set, deliver to these endpoints only
	// Trigger is what the automatic attempts of its deliveries are logged
	// as: webhookd.TriggerTest for a test event, else "" (auto).
	Trigger string
	// TraceParent is the W3C traceparent of the span that writes the
	// event, kept with it so that the attempts of its deliveries continue
	// that trace (Lease.TraceParent); "" without tracing.
	TraceParent string
}

// CreateEvents writes the events and one pending delivery per matching
// active endpoint, all or nothing, as a request without an Idempotency-Key
// takes the Ingester's steps (a test event). A taken external_id fails the
// whole call with external_id_taken carrying the existing event's id; an
// unknown id in EndpointIDs with validation_failed naming it (field
// prefixed by fieldPrefix(i), e.g. "events[3]."). The deliveries are due
// at now. It runs in a transaction of its own, on the pool.
func (s *Store) CreateEvents(ctx context.Context, projectID string, evs []NewEvent, now time.Time, fieldPrefix func(int) string) ([]webhookd.Event, error) {
	if s.tx != nil {
		return nil, errors.New("storage: CreateEvents inside a transaction")
	}
	c := &ingestCall{req: IngestRequest{Key: IdempotencyKey{ProjectID: projectID}, Events: evs, Now: now, FieldPrefix: fieldPrefix},
		k: ikey{project: projectID}}
	for range maxGroupTries {
		c.retry = retryNone
		if err := s.db.ingestGroup(ctx, s.db.pool, []*ingestCall{c}, 0, func() {}); err != nil {
			return nil, translate(err, "create events")
		}
		if c.retry == retryNone {
			return c.res.Events, c.err
		}
	}
	return nil, fmt.Errorf("create events: the endpoints kept changing")
}

// eventRows are new events, as the columns writeGroupRows takes, and
// their deliveries.
type eventRows struct {
	ids, projects, types, data []string
	ext                        []*string
	at                         []time.Time
	// traceParents are the events' NewEvent.TraceParent ("" for none),
	// nil until one has one: without tracing, nothing is added or sent
	// (the statement's unnest pads what it lacks with NULLs). Not among
	// args, which the operational events' statement takes too.
	traceParents []string
	deliveries   deliveryRows
}

// add makes the events, with new ids, and one pending delivery, due at
// now, per target endpoint; it returns the events.
// fifo names the target endpoints whose ordering is fifo.
func (r *eventRows) add(projectID string, evs []NewEvent, targets [][]string, fifo map[string]bool, now time.Time) []webhookd.Event {
	ids := newIDsTime(prefixEvent, now, len(evs)) // their time is their created_at's: the day partition they go to
	for i, ev := range evs {
		r.ids, r.projects, r.types = append(r.ids, ids[i]), append(r.projects, projectID), append(r.types, ev.Type)
		r.data, r.ext, r.at = append(r.data, string(ev.Data)), append(r.ext, ev.ExternalID), append(r.at, now)
		if ev.TraceParent != "" || r.traceParents != nil {
			for len(r.traceParents) < len(r.ids)-1 { // the events before it had none
				r.traceParents = append(r.traceParents, "")
			}
			r.traceParents = append(r.traceParents, ev.TraceParent)
		}
	}
	return r.deliveries.add(projectID, evs, ids, targets, fifo, now)
}

// rowsMark is how many rows eventRows held at one time.
type rowsMark struct{ events, deliveries int }

func (r *eventRows) mark() rowsMark { return rowsMark{len(r.ids), len(r.deliveries.ids)} }

// truncate drops the rows added since m.
func (r *eventRows) truncate(m rowsMark) {
	r.ids, r.projects, r.types = r.ids[:m.events], r.projects[:m.events], r.types[:m.events]
	r.data, r.ext, r.at = r.data[:m.events], r.ext[:m.events], r.at[:m.events]
	r.traceParents = r.traceParents[:min(len(r.traceParents), m.events)]
	d, n := &r.deliveries, m.deliveries
	d.ids, d.projects, d.events, d.endpoints = d.ids[:n], d.projects[:n], d.events[:n], d.endpoints[:n]
	d.types, d.triggers, d.due, d.fifo = d.types[:n], d.triggers[:n], d.due[:n], d.fifo[:n]
}

func (r *eventRows) args() []any { return []any{r.ids, r.projects, r.types, r.data, r.ext, r.at} }

// deliveryRows are new deliveries, as the columns writeGroupRows takes.
type deliveryRows struct {
	ids, projects, events, endpoints, types, triggers []string
	due                                               []time.Time
	fifo                                              []bool // its endpoint's ordering is fifo
}

// add makes the events with the ids given and one pending delivery, due at
// now, per target endpoint; it returns the events.
func (d *deliveryRows) add(projectID string, evs []NewEvent, ids []string, targets [][]string, fifo map[string]bool, now time.Time) []webhookd.Event {
	out := make([]webhookd.Event, len(evs))
	for i, ev := range evs {
		e := webhookd.Event{ID: ids[i], ProjectID: projectID, Type: ev.Type, Data: ev.Data,
			ExternalID: ev.ExternalID, CreatedAt: now, Deliveries: make([]webhookd.DeliveryRef, 0, len(targets[i]))}
		for _, ep := range targets[i] {
			ref := webhookd.DeliveryRef{ID: newIDAt(prefixDelivery, e.ID), EndpointID: ep, Status: webhookd.DeliveryPending}
			e.Deliveries = append(e.Deliveries, ref)
			d.ids, d.projects, d.events = append(d.ids, ref.ID), append(d.projects, projectID), append(d.events, e.ID)
			d.endpoints, d.types = append(d.endpoints, ep), append(d.types, e.Type)
			d.triggers, d.due = append(d.triggers, cmp.Or(ev.Trigger, webhookd.TriggerAuto)), append(d.due, now)
			d.fifo = append(d.fifo, fifo[ep])
		}
		out[i] = e
	}
	return out
}

func (d *deliveryRows) args() []any {
	return []any{d.ids, d.projects, d.events, d.endpoints, d.types, d.triggers, d.due, d.fifo}
}

// endpointMatch is what matching an event to endpoints reads of one.
type endpointMatch struct {
	projectID string
	id        string
	types     []string
	active    bool
	fifo      bool // ordering fifo: its deliveries take a place in its queue
	version   int  // bumped by every change that matters to matching
	// filter narrows the events of its types it gets (nil: all of them).
	// Stored only once checked, it compiles; should it not, every event
	// of its types goes (a delivery too many, never one lost).
	filter *filter.Filter
}

// matchEndpoints returns, per event, the ids of the endpoints it goes to:
// the listed endpoint_ids that are active, else every active endpoint
// subscribed to its type whose filter the event matches (a listed
// endpoint is asked for by name: its filter does not apply). eps are the project's candidates in id order; a
// listed id that is not among them fails validation.
func matchEndpoints(evs []NewEvent, eps []endpointMatch, fieldPrefix func(int) string) ([][]string, error) {
	out := make([][]string, len(evs))
	var byID map[string]endpointMatch
	for i, ev := range evs {
		if ev.EndpointIDs != nil {
			if byID == nil {
				byID = make(map[string]endpointMatch, len(eps))
				for _, e := range eps {
					byID[e.id] = e
				}
			}
			for j, id := range ev.EndpointIDs {
				e, ok := byID[id]
				if !ok {
					return nil, webhookd.Invalid(fmt.Sprintf("%sendpoint_ids[%d]", fieldPrefix(i), j), "no such endpoint %q", id)
				}
				if e.active && !slices.Contains(out[i], id) {
					out[i] = append(out[i], id)
				}
			}
			continue
		}
		for _, e := range eps {
			if e.active && (len(e.types) == 0 || slices.Contains(e.types, ev.Type)) && e.filter.Match(ev.Type, ev.Data) {
				out[i] = append(out[i], e.id)
			}
		}
	}
	return out, nil
}

// GetEvent returns an event of the project with its deliveries.
func (s *Store) GetEvent(ctx context.Context, projectID, id string) (webhookd.Event, error) {
	var e webhookd.Event
	err := s.q.QueryRow(ctx, `SELECT id, project_id, type, data, external_id, created_at FROM events
		WHERE id = $1 AND project_id = $2`, id, projectID).Scan(&e.ID, &e.ProjectID, &e.Type, &e.Data, &e.ExternalID, &e.CreatedAt)
	if err != nil {
		return e, translate(err, "event")
	}
	rows, err := s.q.Query(ctx, `SELECT id, endpoint_id, status FROM deliveries WHERE event_id = $1 ORDER BY id`, id)
	if err != nil {
		return e, translate(err, "event deliveries")
	}
	e.Deliveries, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhookd.DeliveryRef, error) {
		var d webhookd.DeliveryRef
		err := r.Scan(&d.ID, &d.EndpointID, &d.Status)
		return d, err
	})
	if e.Deliveries == nil {
		e.Deliveries = []webhookd.DeliveryRef{}
	}
	return e, translate(err, "event deliveries")
}
