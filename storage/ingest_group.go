package storage

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/webhookd/webhookd"
)

// ingestGroup writes a group of event requests in one transaction of two
// round trips, on one connection, and sets each request's outcome (or its
// retry). The first round trip begins the transaction, claims every key
// (claimKeys: a stored record answers its request here), reads the
// endpoints the events can go to and the external ids taken; the second
// writes the events and deliveries of the requests that claimed their key,
// with their responses, and commits. A row lock waited for longer than
// lockTimeout (0: no limit) fails the group, which then writes nothing.
// opened is called as the first round trip returns.
func (db *DB) ingestGroup(ctx context.Context, group []*ingestCall, lockTimeout time.Duration, opened func()) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		opened()
		return fmt.Errorf("ingest: %w", err)
	}
	defer conn.Release() // pgxpool drops a connection still in a transaction
	if err = db.writeGroup(ctx, conn, group, lockTimeout, opened); err != nil && conn.Conn().PgConn().TxStatus() != 'I' {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		conn.Exec(rctx, "ROLLBACK")
		cancel()
	}
	return err
}

// batchConn is what writeGroup needs of a connection.
type batchConn interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

func (db *DB) writeGroup(ctx context.Context, conn batchConn, group []*ingestCall, lockTimeout time.Duration, opened func()) error {
	var (
		keys               []IdempotencyKey
		nows               []time.Time
		projects           []string
		listed, types      []string
		extProjects, extID []string
	)
	for _, c := range group {
		if c.k.key != "" {
			keys, nows = append(keys, c.req.Key), append(nows, c.req.Now)
		}
		if !slices.Contains(projects, c.k.project) {
			projects = append(projects, c.k.project)
		}
		for _, ev := range c.req.Events {
			listed = append(listed, ev.EndpointIDs...)
			types = append(types, ev.Type)
			if ev.ExternalID != nil {
				extProjects, extID = append(extProjects, c.k.project), append(extID, *ev.ExternalID)
			}
		}
	}

	var (
		claims []claimResult
		eps    = map[string][]endpointMatch{} // by project, in id order
		taken  = map[ikey]string{}            // (project, external id) → event id
	)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// The statements run generic plans (planSettings).
	b.Queue(`SELECT set_config('lock_timeout', $1, true), `+genericPlans, strconv.FormatInt(lockTimeout.Milliseconds(), 10))
	if len(keys) > 0 {
		b.Queue(claimKeys, claimArgs(keys, nows)...).Query(func(rows pgx.Rows) (err error) {
			claims, err = db.scanClaims(rows)
			return err
		})
	}
	b.Queue(matchCandidates, projects, listed, types).Query(func(rows pgx.Rows) error {
		list, err := collectEndpointMatches(rows)
		for _, e := range list {
			eps[e.projectID] = append(eps[e.projectID], e)
		}
		return err
	})
	if len(extID) > 0 {
		b.Queue(`SELECT e.project_id, e.external_id, e.id FROM events e
			JOIN unnest($1::text[], $2::text[]) AS t(p, x) ON e.project_id = t.p AND e.external_id = t.x`,
			extProjects, extID).Query(func(rows pgx.Rows) error {
			var (
				k  ikey
				id string
			)
			_, err := pgx.ForEachRow(rows, []any{&k.project, &k.key, &id}, func() error { taken[k] = id; return nil })
			return err
		})
	}
	err := conn.SendBatch(ctx, b).Close()
	opened()
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}

	var (
		rows     eventRows
		rec      storedResponses
		released struct{ projects, keys []string }
	)
	next := 0 // the next claim's index
	for _, c := range group {
		if c.k.key != "" {
			switch claim := claims[next]; claim.state {
			case claimStored:
				next++
				c.res.Response, c.err = claim.replay(c.req.Key)
				c.res.Replayed = c.err == nil
				continue
			case claimBusy:
				next++
				c.retry = retryBusy
				continue
			case claimRaced:
				next++
				c.retry = retryNow
				continue
			}
			next++
		}
		mark := rows.mark()
		evs, workErr := rows.write(c, eps[c.k.project], taken)
		if c.req.Render == nil { // no key: nothing to remember
			c.res.Events, c.err = evs, workErr
			noteExternalIDs(c, evs, taken)
			continue
		}
		resp, err := c.req.Render(evs, workErr)
		if err != nil || !resp.remembered() { // it writes nothing and its key is free again
			rows.truncate(mark)
			released.projects, released.keys = append(released.projects, c.k.project), append(released.keys, c.k.key)
			c.res.Response, c.err = resp, err
			continue
		}
		c.res.Response = resp
		if workErr == nil {
			c.res.Events = evs
			noteExternalIDs(c, evs, taken)
		}
		rec.add(c.req.Key, c.req.Now, resp, db.box)
	}

	b = &pgx.Batch{}
	args := append(append(append(rows.args(), rows.deliveries.args()...), rec.args()...), released.projects, released.keys)
	b.Queue(writeGroupRows, args...)
	var tag pgconn.CommandTag
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("ingest: %w", pgx.ErrTxCommitRollback)
	}
	return nil
}

// writeGroupRows writes a group's rows in one statement: its events
// ($1-$6, eventRows.args), their deliveries ($7-$14, deliveryRows.args;
// a delivery to an ordered endpoint takes its place in the endpoint's
// queue, in the order of the rows), the responses of its keys ($15-$22,
// storedResponses.args: the records are the transaction's own, each found
// through the key's index) and the release of the keys whose response is
// not remembered ($23 projects, $24 keys). The deliveries' foreign keys are checked at the statement's end,
// when the events are in.
const writeGroupRows = `
	WITH ev AS (
		INSERT INTO events (id, project_id, type, data, external_id, created_at)
		SELECT id, prj, typ, data::json, ext, at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
			AS t(id, prj, typ, data, ext, at)
	), dl AS (
		INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, trigger, status, next_attempt_at, created_at,
			updated_at, fifo_seq)
		SELECT id, prj, ev, ep, typ, trig, 'pending', due, due, due, CASE WHEN fifo THEN nextval('deliveries_fifo_seq') END
		FROM unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::timestamptz[], $14::bool[])
			WITH ORDINALITY AS t(id, prj, ev, ep, typ, trig, due, fifo, ord)
		ORDER BY ord
	), rec AS (
		INSERT INTO idempotency_records (project_id, key, fingerprint, created_at, expires_at,
			status_code, content_type, response_body)
		SELECT * FROM unnest($15::text[], $16::text[], $17::bytea[], $18::timestamptz[], $19::timestamptz[],
			$20::int4[], $21::text[], $22::bytea[])
		ON CONFLICT (project_id, key) DO UPDATE SET status_code = EXCLUDED.status_code,
			content_type = EXCLUDED.content_type, response_body = EXCLUDED.response_body
	), released AS (
		DELETE FROM idempotency_records r USING unnest($23::text[], $24::text[]) AS t(prj, key)
		WHERE r.project_id = t.prj AND r.key = t.key
	)
	SELECT`

// write adds the events of c, which claimed its key, and their deliveries
// to r, and returns them; or it returns the client error that leaves them
// unwritten: the body's own (Invalid), an unknown endpoint id, an external
// id taken before or by an earlier request of the group. eps are the
// endpoints of c's project that can match.
func (r *eventRows) write(c *ingestCall, eps []endpointMatch, taken map[ikey]string) ([]webhookd.Event, error) {
	if c.req.Invalid != nil {
		return nil, c.req.Invalid
	}
	targets, err := matchEndpoints(c.req.Events, eps, c.req.FieldPrefix)
	if err != nil {
		return nil, err
	}
	for _, ev := range c.req.Events {
		if ev.ExternalID == nil {
			continue
		}
		if id, ok := taken[ikey{c.k.project, *ev.ExternalID}]; ok {
			return nil, &webhookd.Error{Code: webhookd.CodeExternalIDTaken, ExistingID: id,
				Message: fmt.Sprintf("an event with external_id %q exists already", *ev.ExternalID)}
		}
	}
	var fifo map[string]bool // nil unless an endpoint of the project is ordered
	for _, e := range eps {
		if e.fifo {
			if fifo == nil {
				fifo = map[string]bool{}
			}
			fifo[e.id] = true
		}
	}
	return r.add(c.k.project, c.req.Events, targets, fifo, c.req.Now), nil
}

// noteExternalIDs adds the external ids of evs, which c writes, to taken:
// a later request of the group with one of them gets external_id_taken,
// as it would once the group commits.
func noteExternalIDs(c *ingestCall, evs []webhookd.Event, taken map[ikey]string) {
	for i, ev := range c.req.Events {
		if ev.ExternalID != nil && i < len(evs) {
			taken[ikey{c.k.project, *ev.ExternalID}] = evs[i].ID
		}
	}
}
