package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// operationalEvent is an event webhookd itself writes into a project, about
// one of its endpoints (SPEC §3 "Operational events").
type operationalEvent struct {
	projectID string
	about     string    // the endpoint it is about, which never gets it
	typ       string    // a reserved type: webhookd.EventCircuitOpened, ...
	data      any       // its data, as JSON
	at        time.Time // its time, and when its deliveries are due
}

// insertOperationalEvents writes evs in tx, the transaction of the change
// they tell of, so that there is never a change without its event or an
// event without its change. Each gets one pending delivery, due at its
// time, per active endpoint of its project that lists its type by name
// (not one that takes every type), but the endpoint it is about; an event
// with none is kept all the same, as the endpoint's history. It returns,
// per event, the deliveries to enqueue once tx has committed.
func insertOperationalEvents(ctx context.Context, tx pgx.Tx, evs []operationalEvent) ([][]webhookd.ScheduledDelivery, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	targets, fifo, err := operationalTargets(ctx, tx, evs)
	if err != nil {
		return nil, fmt.Errorf("operational events: %w", err)
	}
	var rows eventRows
	out := make([][]webhookd.ScheduledDelivery, len(evs))
	for i, ev := range evs {
		data, err := json.Marshal(ev.data)
		if err != nil {
			return nil, fmt.Errorf("operational event %s: %w", ev.typ, err)
		}
		made := rows.add(ev.projectID, []NewEvent{{Type: ev.typ, Data: data}}, targets[i:i+1], fifo, ev.at)
		for _, d := range made[0].Deliveries {
			out[i] = append(out[i], webhookd.ScheduledDelivery{ID: d.ID, EndpointID: d.EndpointID, DueAt: ev.at})
		}
	}
	if err := lockQueues(ctx, tx, fifo); err != nil {
		return nil, fmt.Errorf("operational events: %w", err)
	}
	if _, err := tx.Exec(ctx, insertOperationalSQL, append(rows.args(), rows.deliveries.args()...)...); err != nil {
		return nil, fmt.Errorf("operational events: %w", err)
	}
	return out, nil
}

// operationalTargets returns, per event, the endpoints it goes to, in id
// order, and which of them are ordered (fifo).
func operationalTargets(ctx context.Context, tx pgx.Tx, evs []operationalEvent) ([][]string, map[string]bool, error) {
	var projects, types, about []string
	for _, ev := range evs {
		projects, types, about = append(projects, ev.projectID), append(types, ev.typ), append(about, ev.about)
	}
	rows, err := tx.Query(ctx, `SELECT t.ord, e.id, e.ordering = 'fifo'
		FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS t(prj, typ, about, ord)
			JOIN endpoints e ON e.project_id = t.prj AND t.typ = ANY (e.event_types) AND e.id <> t.about
		WHERE e.deleted_at IS NULL AND e.status = 'active'
		ORDER BY t.ord, e.id`, projects, types, about)
	if err != nil {
		return nil, nil, err
	}
	targets, fifo := make([][]string, len(evs)), map[string]bool{}
	var (
		ord     int
		id      string
		ordered bool
	)
	_, err = pgx.ForEachRow(rows, []any{&ord, &id, &ordered}, func() error {
		targets[ord-1] = append(targets[ord-1], id)
		if ordered {
			fifo[id] = true
		}
		return nil
	})
	return targets, fifo, err
}

// lockQueues takes the advisory lock of each ordered endpoint's queue until
// tx ends, before its deliveries take their numbers (fifo_seq): a number
// taken later then cannot commit before an earlier one, and a worker never
// finds the head of a queue ahead of a number still to appear. The locks
// are taken in id order, so two transactions never wait for each other.
func lockQueues(ctx context.Context, tx pgx.Tx, fifo map[string]bool) error {
	if len(fifo) == 0 {
		return nil
	}
	ids := make([]string, 0, len(fifo))
	for id := range fifo {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// unnest yields the ids in the array's order, one lock after another.
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(id, 0)) FROM unnest($1::text[]) AS t(id)`, ids)
	return err
}

// insertOperationalSQL writes events and their deliveries: $1-$6 are
// eventRows.args, $7-$14 deliveryRows.args. A delivery to an ordered
// endpoint takes its number in the order of the rows; the deliveries'
// foreign keys are checked at the statement's end, when the events are in.
const insertOperationalSQL = `
	WITH ev AS (
		INSERT INTO events (id, project_id, type, data, external_id, created_at)
		SELECT id, prj, typ, data::json, ext, at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[]) AS t(id, prj, typ, data, ext, at)
	)
	INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, trigger, status, next_attempt_at, created_at,
		updated_at, fifo_seq)
	SELECT id, prj, ev, ep, typ, trig, 'pending', due, due, due, CASE WHEN fifo THEN nextval('deliveries_fifo_seq') END
	FROM unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::timestamptz[], $14::bool[])
		WITH ORDINALITY AS t(id, prj, ev, ep, typ, trig, due, fifo, ord)
	ORDER BY ord`
