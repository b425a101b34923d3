package storage

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/webhookd/webhookd"
)

// The one-round-trip group. Most groups are new keys, events without an
// external_id and endpoints that have not changed since the last group of
// their project. For those the group matches endpoints in memory, from the
// endpoints it read before, and sends everything at once: it checks in the
// transaction that those endpoints are still exactly what it read (their
// ids and versions: every change of an endpoint bumps its version), claims
// every key together with its response, writes the events and deliveries
// of the keys it claimed, and commits. A key it did not claim (a replay, a
// mismatch, a request of another process in flight) writes nothing and
// runs alone. If the endpoints changed, the transaction fails and the
// group runs the two round trips, which read them again.

// endpointCache holds, per project, its endpoints as a group read them,
// and their digest (endpointsDigest).
type endpointCache struct {
	mu sync.Mutex
	m  map[string]cachedEndpoints
}

type cachedEndpoints struct {
	eps    []endpointMatch
	digest string
}

// maxCachedProjects bounds the cache; past it, it starts again empty.
const maxCachedProjects = 10000

func (c *endpointCache) get(projects []string) (map[string]cachedEndpoints, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	found, missing := make(map[string]cachedEndpoints, len(projects)), []string(nil)
	for _, p := range projects {
		if e, ok := c.m[p]; ok {
			found[p] = e
		} else {
			missing = append(missing, p)
		}
	}
	return found, missing
}

func (c *endpointCache) put(p string, e cachedEndpoints) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedProjects {
		c.m = map[string]cachedEndpoints{}
	}
	c.m[p] = e
}

func (c *endpointCache) forget(projects []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range projects {
		delete(c.m, p)
	}
}

// endpointsDigest is the digest of a project's endpoints that the
// transaction compares: md5 of "id:version" for every endpoint not
// deleted, in id order (bytewise), joined by commas.
const endpointsDigest = `md5(coalesce(string_agg(e.id || ':' || e.version, ',' ORDER BY e.id COLLATE "C"), ''))`

// loadEndpoints reads projects' endpoints into the cache.
func (g *Ingester) loadEndpoints(ctx context.Context, projects []string) error {
	rows, err := g.db.pool.Query(ctx, `SELECT project_id, id, event_types, status = 'active', version FROM endpoints
		WHERE project_id = ANY($1) AND deleted_at IS NULL ORDER BY project_id, id COLLATE "C"`, projects)
	if err != nil {
		return err
	}
	byProject := make(map[string]*cachedEndpoints, len(projects))
	parts := make(map[string][]string, len(projects))
	for _, p := range projects {
		byProject[p] = &cachedEndpoints{}
	}
	var (
		e       endpointMatch
		version int
	)
	_, err = pgx.ForEachRow(rows, []any{&e.projectID, &e.id, &e.types, &e.active, &version}, func() error {
		c := byProject[e.projectID]
		c.eps = append(c.eps, endpointMatch{projectID: e.projectID, id: e.id, types: e.types, active: e.active})
		parts[e.projectID] = append(parts[e.projectID], e.id+":"+strconv.Itoa(version))
		return nil
	})
	if err != nil {
		return err
	}
	for p, c := range byProject {
		sum := md5.Sum([]byte(strings.Join(parts[p], ",")))
		c.digest = hex.EncodeToString(sum[:])
		g.endpoints.put(p, *c)
	}
	return nil
}

// errEndpointsChanged: the endpoints a one-round-trip group matched from
// had changed by its transaction.
var errEndpointsChanged = errors.New("storage: endpoints changed since they were read")

// commitFast runs group in one round trip when it can. ok is false when
// it did not try (an external_id, endpoints it has not read yet); err is
// set when it tried and failed, having written nothing.
//
// Its one round trip is also its first: opened is called as it is sent.
func (g *Ingester) commitFast(ctx context.Context, conn pgxConn, group []*ingestCall, opened func()) (ok bool, err error) {
	projects := make([]string, 0, 1)
	for _, c := range group {
		for _, ev := range c.req.Events {
			if ev.ExternalID != nil {
				return false, nil
			}
		}
		if !slices.Contains(projects, c.k.project) {
			projects = append(projects, c.k.project)
		}
	}
	cached, missing := g.endpoints.get(projects)
	if len(missing) > 0 {
		if err := g.loadEndpoints(ctx, missing); err != nil {
			return false, nil
		}
		if cached, missing = g.endpoints.get(projects); len(missing) > 0 {
			return false, nil
		}
	}

	var (
		rec storedResponses
		ev  struct {
			ids, projects, keys, types, data []string
			at                               []time.Time
		}
		rows     deliveryRows
		rowKeys  []string
		digests  = make([]string, len(projects))
		outcomes = make([]struct {
			resp StoredResponse
			evs  []webhookd.Event
		}, len(group))
	)
	for i, p := range projects {
		digests[i] = cached[p].digest
	}
	for i, c := range group {
		p := c.k.project
		targets, matchErr := matchEndpoints(c.req.Events, cached[p].eps, c.req.FieldPrefix)
		var evs []webhookd.Event
		if matchErr == nil {
			ids := make([]string, len(c.req.Events))
			for j, e := range c.req.Events {
				ids[j] = newID(prefixEvent)
				ev.ids, ev.projects, ev.keys = append(ev.ids, ids[j]), append(ev.projects, p), append(ev.keys, c.k.key)
				ev.types, ev.data, ev.at = append(ev.types, e.Type), append(ev.data, string(e.Data)), append(ev.at, c.req.Now)
			}
			before := len(rows.ids)
			evs = rows.add(p, c.req.Events, ids, targets, c.req.Now)
			for range len(rows.ids) - before {
				rowKeys = append(rowKeys, c.k.key)
			}
		}
		resp, rerr := c.req.Render(evs, matchErr)
		if rerr != nil || !resp.remembered() {
			return false, nil // the two round trips sort it out
		}
		outcomes[i].resp = resp
		if matchErr == nil {
			outcomes[i].evs = evs
		}
		rec.add(c, resp, g.db.box)
	}

	claimed := map[ikey]bool{}
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('lock_timeout', '200', true), ` + genericPlans)
	// A changed digest fails the cast, and with it the transaction.
	b.Queue(`SELECT CASE WHEN x.d <> t.digest THEN (t.prj || ': endpoints changed')::int END
		FROM unnest($1::text[], $2::text[]) AS t(prj, digest)
		CROSS JOIN LATERAL (SELECT `+endpointsDigest+` AS d FROM endpoints e
			WHERE e.project_id = t.prj AND e.deleted_at IS NULL) x`, projects, digests)
	// $1-$8 the records, $9-$14 the events, $15-$22 the deliveries.
	args := append(rec.args(), ev.ids, ev.projects, ev.keys, ev.types, ev.data, ev.at)
	args = append(append(args, rows.args()...), rowKeys)
	b.Queue(`WITH claimed AS (
			INSERT INTO idempotency_records (project_id, key, fingerprint, created_at, expires_at,
				status_code, content_type, response_body)
			SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::timestamptz[], $5::timestamptz[],
				$6::int4[], $7::text[], $8::bytea[])
			ON CONFLICT (project_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
				status_code = EXCLUDED.status_code, content_type = EXCLUDED.content_type,
				response_body = EXCLUDED.response_body, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
			WHERE idempotency_records.expires_at <= EXCLUDED.created_at
			RETURNING project_id, key
		), ev AS (
			INSERT INTO events (id, project_id, type, data, created_at)
			SELECT t.id, t.prj, t.typ, t.data::json, t.at
			FROM unnest($9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::timestamptz[])
				AS t(id, prj, key, typ, data, at)
			JOIN claimed c ON c.project_id = t.prj AND c.key = t.key
		), dl AS (
			INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, trigger, status,
				next_attempt_at, created_at, updated_at)
			SELECT t.id, t.prj, t.ev, t.ep, t.typ, t.trig, 'pending', t.due, t.due, t.due
			FROM unnest($15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[],
				$21::timestamptz[], $22::text[]) AS t(id, prj, ev, ep, typ, trig, due, key)
			JOIN claimed c ON c.project_id = t.prj AND c.key = t.key
		)
		SELECT project_id, key FROM claimed`,
		args...,
	).Query(func(r pgx.Rows) error {
		var k ikey
		_, err := pgx.ForEachRow(r, []any{&k.project, &k.key}, func() error { claimed[k] = true; return nil })
		return err
	})
	opened()
	// The batch is one implicit transaction (no BEGIN, no COMMIT: two
	// statements fewer a group): it commits at the batch's end, or, when a
	// statement fails, PostgreSQL skips the rest and rolls it all back.
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "22P02" && strings.Contains(pe.Message, "endpoints changed") {
			err = errEndpointsChanged
		}
		g.endpoints.forget(projects)
		return true, err
	}
	for i, c := range group {
		if claimed[c.k] {
			c.resp, c.evs = outcomes[i].resp, outcomes[i].evs
		} else {
			c.err = ErrIngestAlone // a replay or a mismatch: it wrote nothing
		}
	}
	return true, nil
}

// pgxConn is what commitFast needs of a connection.
type pgxConn interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}
