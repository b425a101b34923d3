package storage

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
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
}

// CreateEvents writes the events and one pending delivery per matching
// active endpoint, all or nothing. A taken external_id fails the whole call
// with external_id_taken carrying the existing event's id; an unknown id in
// EndpointIDs with validation_failed naming it (field prefixed by
// fieldPrefix(i), e.g. "events[3]."). The deliveries are due at now.
//
// Inside WithIdempotency the deliveries' insert travels with the stored
// response, so they can be read back only once that transaction commits.
func (s *Store) CreateEvents(ctx context.Context, projectID string, evs []NewEvent, now time.Time, fieldPrefix func(int) string) ([]webhookd.Event, error) {
	var out []webhookd.Event
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// The events are inserted in the same round trip as the endpoints
		// are read: the delivery ids are made here, so their insert follows.
		evIDs := make([]string, len(evs))
		for i := range evs {
			evIDs[i] = newID(prefixEvent)
		}
		targets, inserted, err := matchAndInsert(ctx, tx, projectID, evs, evIDs, now, fieldPrefix)
		if err != nil {
			return err
		}
		var rows deliveryRows
		out = rows.add(projectID, evs, evIDs, targets, now)
		if len(inserted) != len(evIDs) {
			return externalIDTaken(ctx, tx, projectID, evs, inserted, evIDs)
		}
		if len(rows.ids) == 0 {
			return nil
		}
		return s.execLater(ctx, tx, insertDeliveries, rows.args()...)
	})
	if err != nil {
		return nil, translate(err, "create events")
	}
	return out, nil
}

// deliveryRows are new deliveries, as the columns of insertDeliveries.
type deliveryRows struct {
	ids, projects, events, endpoints, types, triggers []string
	due                                               []time.Time
}

// add makes the events with the ids given and one pending delivery, due at
// now, per target endpoint; it returns the events.
func (d *deliveryRows) add(projectID string, evs []NewEvent, ids []string, targets [][]string, now time.Time) []webhookd.Event {
	out := make([]webhookd.Event, len(evs))
	for i, ev := range evs {
		e := webhookd.Event{ID: ids[i], ProjectID: projectID, Type: ev.Type, Data: ev.Data,
			ExternalID: ev.ExternalID, CreatedAt: now, Deliveries: make([]webhookd.DeliveryRef, 0, len(targets[i]))}
		for _, ep := range targets[i] {
			ref := webhookd.DeliveryRef{ID: newID(prefixDelivery), EndpointID: ep, Status: webhookd.DeliveryPending}
			e.Deliveries = append(e.Deliveries, ref)
			d.ids, d.projects, d.events = append(d.ids, ref.ID), append(d.projects, projectID), append(d.events, e.ID)
			d.endpoints, d.types = append(d.endpoints, ep), append(d.types, e.Type)
			d.triggers, d.due = append(d.triggers, cmp.Or(ev.Trigger, webhookd.TriggerAuto)), append(d.due, now)
		}
		out[i] = e
	}
	return out
}

func (d *deliveryRows) args() []any {
	return []any{d.ids, d.projects, d.events, d.endpoints, d.types, d.triggers, d.due}
}

const insertDeliveries = `
	INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, trigger, status, next_attempt_at, created_at, updated_at)
	SELECT id, prj, ev, ep, typ, trig, 'pending', due, due, due
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[])
		AS t(id, prj, ev, ep, typ, trig, due)`

// matchAndInsert inserts the events with the ids given (but those whose
// external_id is taken) and returns, per event, the ids of the endpoints it
// goes to (the listed endpoint_ids that are active, else every active
// endpoint subscribed to its type) and the ids inserted. Both statements
// travel in one round trip.
func matchAndInsert(ctx context.Context, tx pgx.Tx, projectID string, evs []NewEvent, ids []string, now time.Time,
	fieldPrefix func(int) string) ([][]string, []string, error) {
	var listed []string
	types, datas, extIDs := make([]string, len(evs)), make([]string, len(evs)), make([]*string, len(evs))
	for i, ev := range evs {
		listed = append(listed, ev.EndpointIDs...)
		types[i], datas[i], extIDs[i] = ev.Type, string(ev.Data), ev.ExternalID
	}
	b := &pgx.Batch{}
	var eps []endpointMatch
	b.Queue(matchCandidates, []string{projectID}, listed, types).Query(func(rows pgx.Rows) (err error) {
		eps, err = collectEndpointMatches(rows)
		return err
	})
	var inserted []string
	b.Queue(`
		INSERT INTO events (id, project_id, type, data, external_id, created_at)
		SELECT id, $1, type, data::json, ext, $6
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS t(id, type, data, ext)
		ON CONFLICT (project_id, external_id) WHERE external_id IS NOT NULL DO NOTHING
		RETURNING id`, projectID, ids, types, datas, extIDs, now).Query(func(rows pgx.Rows) error {
		var err error
		inserted, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, err
	}
	out, err := matchEndpoints(evs, eps, fieldPrefix)
	return out, inserted, err
}

// endpointMatch is what matching an event to endpoints reads of one.
type endpointMatch struct {
	projectID string
	id        string
	types     []string
	active    bool
}

func collectEndpointMatches(rows pgx.Rows) ([]endpointMatch, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (endpointMatch, error) {
		var e endpointMatch
		err := r.Scan(&e.projectID, &e.id, &e.types, &e.active)
		return e, err
	})
}

// matchEndpoints returns, per event, the ids of the endpoints it goes to:
// the listed endpoint_ids that are active, else every active endpoint
// subscribed to its type. eps are the project's candidates in id order; a
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
			if e.active && (len(e.types) == 0 || slices.Contains(e.types, ev.Type)) {
				out[i] = append(out[i], e.id)
			}
		}
	}
	return out, nil
}

// externalIDTaken builds the external_id_taken error for the first event
// whose external_id already belonged to another event.
func externalIDTaken(ctx context.Context, tx pgx.Tx, projectID string, evs []NewEvent, inserted, ids []string) error {
	for i, ev := range evs {
		if slices.Contains(inserted, ids[i]) || ev.ExternalID == nil {
			continue
		}
		var existing string
		err := tx.QueryRow(ctx, `SELECT id FROM events WHERE project_id = $1 AND external_id = $2`,
			projectID, *ev.ExternalID).Scan(&existing)
		if err != nil {
			return err
		}
		return &webhookd.Error{Code: webhookd.CodeExternalIDTaken, ExistingID: existing,
			Message: fmt.Sprintf("an event with external_id %q exists already", *ev.ExternalID)}
	}
	return fmt.Errorf("events insert: %d of %d rows written", len(inserted), len(ids))
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
