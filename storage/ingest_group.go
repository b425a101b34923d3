package storage

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// ingestGroup writes a group of event requests in one round trip, on one
// connection, and sets each request's outcome (or its retry). It matches
// the events to the endpoints it holds in memory (endpointCache, read on
// the pool first where it has none) and renders each request's response
// as though its key were free; then one statement (writeGroupSQL), the
// implicit transaction of the batch, claims the keys, writes the events,
// deliveries and responses of the requests that claimed theirs, and
// reports what each found. A stored record answers its request then; a
// busy key, an external id taken meanwhile, or endpoints that changed
// since they were read send the request back to wait or to go again. A
// row lock waited for longer than lockTimeout (0: no limit) fails the
// group, which then writes nothing. A group with deliveries to ordered
// endpoints first waits for their locks (lockFIFOSQL). opened is called
// as the round trip is sent. q is the pool, where the batch is the
// transaction, or a transaction of the caller's (a bulk job's chunk,
// AcceptBulkLines), which a failed group leaves aborted.
func (db *DB) ingestGroup(ctx context.Context, q querier, group []*ingestCall, lockTimeout time.Duration, opened func()) error {
	defer opened()
	var projects []string
	for _, c := range group {
		if !slices.Contains(projects, c.k.project) {
			projects = append(projects, c.k.project)
		}
	}
	eps, err := db.endpoints(ctx, q, projects)
	if err != nil {
		return fmt.Errorf("ingest: read endpoints: %w", err)
	}
	w := db.prepareGroup(group, eps)
	opened() // the next group may gather meanwhile
	b := &pgx.Batch{}
	if eps := w.fifoEndpoints(); len(eps) > 0 {
		// Before lock_timeout is set: the wait is for an earlier group's
		// commit, bounded by that group's own timeouts.
		b.Queue(lockFIFOSQL, eps)
	}
	// The statement runs a generic plan (planSettings).
	b.Queue(`SELECT set_config('lock_timeout', $1, true), `+genericPlans, strconv.FormatInt(lockTimeout.Milliseconds(), 10))
	var states []groupState
	b.Queue(writeGroupSQL, w.args()...).Query(func(rows pgx.Rows) error {
		var err error
		states, err = db.scanGroupStates(rows, w.calls)
		return err
	})
	// On the pool, the batch is one implicit transaction (no BEGIN, no
	// COMMIT): it commits at the batch's end or, when a statement fails,
	// PostgreSQL skips the rest and rolls it all back.
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	if len(states) != len(w.calls) {
		return fmt.Errorf("ingest: %d states for %d requests", len(states), len(w.calls))
	}
	var stale []string
	for i, c := range w.calls {
		switch st := states[i]; st.state {
		case claimed:
			c.res = w.results[i]
			c.err = w.errs[i]
		case claimStored:
			c.res.Response, c.err = st.replay(c.req.Key)
			c.res.Replayed = c.err == nil
		case claimBusy:
			c.retry = retryBusy
		case claimRaced:
			c.retry = retryNow
		case claimStale:
			c.retry = retryNow
			if !slices.Contains(stale, c.k.project) {
				stale = append(stale, c.k.project)
			}
		case claimTaken:
			c.retry = retryNow
			if c.taken == nil {
				c.taken = map[string]string{}
			}
			for j, x := range st.takenExt {
				c.taken[x] = st.takenIDs[j]
			}
		}
	}
	for _, c := range w.deferred {
		c.retry = retryNow
	}
	db.forgetEndpoints(stale)
	return nil
}

// groupRows are what one group writes, as writeGroupSQL's arguments, and
// the outcome each request gets if it claims its key.
type groupRows struct {
	calls    []*ingestCall // the requests in the statement, in order
	deferred []*ingestCall // requests that wait for the next group: an external id of an earlier one
	results  []IngestResult
	errs     []error

	req      storedResponses // one row per request of calls: its response, remembered or not
	remember []bool          // whether each request's response is remembered
	fresh    struct{ projects, digests, listed, types []string }
	ext      struct {
		req []int64
		ids []string
	}
	rows   eventRows
	evReqs []int64 // the request (1-based) of each event row
	dlReqs []int64 // and of each delivery row
}

// prepareGroup matches each request's events to eps and renders its
// response as though it claims its key.
func (db *DB) prepareGroup(group []*ingestCall, eps map[string][]endpointMatch) *groupRows {
	w := &groupRows{}
	for _, c := range group {
		for _, ev := range c.req.Events {
			w.fresh.listed = append(w.fresh.listed, ev.EndpointIDs...)
			if !slices.Contains(w.fresh.types, ev.Type) {
				w.fresh.types = append(w.fresh.types, ev.Type)
			}
		}
	}
	cands := make(map[string][]endpointMatch, len(eps))
	for p, list := range eps {
		cands[p] = candidates(list, w.fresh.listed, w.fresh.types)
		w.fresh.projects, w.fresh.digests = append(w.fresh.projects, p), append(w.fresh.digests, candidateDigest(cands[p]))
	}
	exts := map[ikey]bool{} // external ids of the group's earlier requests
	for _, c := range group {
		if slices.ContainsFunc(c.req.Events, func(ev NewEvent) bool {
			return ev.ExternalID != nil && exts[ikey{c.k.project, *ev.ExternalID}]
		}) {
			w.deferred = append(w.deferred, c)
			continue
		}
		n := int64(len(w.calls) + 1)
		mark := w.rows.mark()
		evs, workErr := w.rows.write(c, cands[c.k.project])
		res, remember := IngestResult{Events: evs}, false
		if c.req.Render != nil {
			var err error
			res.Response, err = c.req.Render(evs, workErr)
			remember = err == nil && res.Response.remembered()
			if workErr != nil || !remember {
				res.Events = nil
			}
			workErr = err
		}
		if res.Events == nil {
			w.rows.truncate(mark)
		}
		for range len(w.rows.deliveries.ids) - mark.deliveries {
			w.dlReqs = append(w.dlReqs, n)
		}
		for i := range res.Events {
			w.evReqs = append(w.evReqs, n)
			if x := c.req.Events[i].ExternalID; x != nil {
				exts[ikey{c.k.project, *x}] = true
				w.ext.req, w.ext.ids = append(w.ext.req, n), append(w.ext.ids, *x)
			}
		}
		w.calls, w.results, w.errs = append(w.calls, c), append(w.results, res), append(w.errs, workErr)
		w.req.add(c.req.Key, c.req.Now, res.Response, db.box)
		w.remember = append(w.remember, remember)
	}
	return w
}

// fifoEndpoints returns the ordered endpoints the group writes
// deliveries to, sorted and each once (lockFIFOSQL's argument).
func (w *groupRows) fifoEndpoints() []string {
	var eps []string
	for i, fifo := range w.rows.deliveries.fifo {
		if fifo {
			eps = append(eps, w.rows.deliveries.endpoints[i])
		}
	}
	slices.Sort(eps)
	return slices.Compact(eps)
}

// lockFIFOSQL takes the transaction-level advisory lock of each ordered
// endpoint of $1 before the group's deliveries take their numbers from
// deliveries_fifo_seq: a sequence hands numbers out in the order they are
// asked for, not the order their transactions commit, so without the lock
// a later number could commit first, be claimed as its endpoint's head,
// and go in flight beside the earlier one. With it, a group that writes
// to an ordered endpoint waits for the one before to commit, so numbers
// commit in order. $1 is sorted (fifoEndpoints), and the locks are taken
// in its order: two groups never wait on each other in a cycle. It is its
// own statement, sent only when a group has an ordered endpoint, so other
// groups pay nothing; and it comes first, so that the group's statement
// takes its snapshot after the earlier group's commit.
const lockFIFOSQL = `SELECT pg_advisory_xact_lock(hashtextextended(ep, 0))
	FROM unnest($1::text[]) WITH ORDINALITY AS t(ep, n) ORDER BY n`

func (w *groupRows) args() []any {
	args := append(w.req.args(), w.remember,
		w.fresh.projects, w.fresh.digests, w.fresh.listed, w.fresh.types, w.ext.req, w.ext.ids)
	args = append(append(args, w.rows.args()...), w.evReqs)
	args = append(append(args, w.rows.deliveries.args()...), w.dlReqs)
	return append(args, w.rows.traceParents)
}

// groupState is what the statement did with one request: its claim
// (claimed: it wrote what it rendered, or it has no key), and the external
// ids found taken with their events (claimTaken).
type groupState struct {
	claimResult
	takenExt, takenIDs []string
}

// The kinds of writeGroupSQL's rows.
const (
	rowWent      = 1 // the request's key is claimed, or it has none: its rows are written
	rowStored    = 2 // the key's stored record
	rowLocked    = 3 // the key's lock was taken, its response is remembered, and it did not claim the key
	rowUnclaimed = 4 // the key's lock was taken for a response not remembered: nothing is written
	rowFresh     = 5 // a project whose endpoints are still the ones matched
	rowTaken     = 6 // an external id of the request's events is taken, by that event
)

// scanGroupStates reads writeGroupSQL's rows into the state of each
// request of calls. A request's state is, first to last: claimed when it
// went; stored when a record answers it; stale when its project's
// endpoints changed; taken when an external id of its events is; claimed
// when it took its key's lock for a response not remembered; raced when it
// took the lock but a record was there first; busy when the lock was held.
func (db *DB) scanGroupStates(rows pgx.Rows, calls []*ingestCall) ([]groupState, error) {
	states := make([]groupState, len(calls))
	locked := make([]claimState, len(calls)) // claimBusy: its lock was held
	var (
		fresh []string
		row   struct {
			kind                int32
			ord                 *int64
			project, ext, event *string
			fp, body            []byte
			status              *int32
			ctype               *string
		}
	)
	_, err := pgx.ForEachRow(rows, []any{&row.kind, &row.ord, &row.project, &row.ext, &row.event,
		&row.fp, &row.status, &row.ctype, &row.body}, func() error {
		if row.kind == rowFresh {
			fresh = append(fresh, *row.project)
			return nil
		}
		if row.ord == nil || *row.ord < 1 || int(*row.ord) > len(calls) {
			return fmt.Errorf("a row of kind %d for no request", row.kind)
		}
		i := *row.ord - 1
		s := &states[i]
		switch row.kind {
		case rowWent:
			s.state = claimed
		case rowStored:
			db.setStored(&s.claimResult, row.fp, *row.status, *row.ctype, row.body)
		case rowLocked:
			locked[i] = claimRaced
		case rowUnclaimed:
			locked[i] = claimed
		case rowTaken:
			s.takenExt, s.takenIDs = append(s.takenExt, *row.ext), append(s.takenIDs, *row.event)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, c := range calls {
		switch s := &states[i]; {
		case s.state == claimed || s.state == claimStored:
		case !slices.Contains(fresh, c.k.project):
			s.state = claimStale
		case s.takenExt != nil:
			s.state = claimTaken
		default:
			s.state = locked[i]
		}
	}
	return states, nil
}

// writeGroupSQL writes a group in one statement. $1-$8 are its requests
// and their responses (storedResponses.args; key "" for none), $9 whether
// each response is remembered; $10-$13 the candidates' digests (the fresh
// CTE); $14-$15 the external ids of the events to write, by request;
// $16-$21 the events (eventRows.args) and $22 the request of each; $23-$30
// their deliveries (deliveryRows.args) and $31 the request of each; $32
// the events' trace parents ("" for none; NULL, or shorter than the
// events, for none of the rest).
//
// A request writes nothing when its project's endpoints changed or an
// external id of its events is taken; else it claims its key as claimKey
// does (an advisory lock never waited for, then the record, here with its
// response, over none or an expired one) and, with the key claimed, its
// events and deliveries are written. A request that did not claim its key
// is answered by the key's stored record when there is one: only those
// look it up (stored), so a new key costs one index probe, the insert's.
// A delivery to an ordered endpoint takes its place in the endpoint's
// queue, in the order of the rows, under the endpoint's lock (lockFIFOSQL). The deliveries' foreign keys are
// checked at the statement's end, when the events are in.
//
// It returns rows of what it found, of the kinds scanGroupStates reads
// (rowWent...): kind, request (1-based), project, external id, event id,
// and a stored record's fingerprint, status, content type and body, in
// no order. The statement keeps to scans of its arrays and CTEs, index
// probes and filters on arrays: a group is small, and every sort or hash
// table in its plan is memory the server allocates, and faults in, anew
// on every call. The final SELECT numbers the kinds as rowWent through
// rowTaken do.
const writeGroupSQL = `
	WITH req AS MATERIALIZED (
		SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::timestamptz[], $5::timestamptz[],
			$6::int4[], $7::text[], $8::bytea[], $9::bool[])
			WITH ORDINALITY AS r(project_id, key, fp, at, expires, code, ctype, body, remember, ord)
	), fresh AS MATERIALIZED ( -- the projects whose candidates' digest is still the one matched from
		SELECT t.p FROM unnest($10::text[], $11::text[]) AS t(p, d)
		WHERE t.d = (SELECT md5(coalesce(string_agg(e.id || ':' || e.version, ',' ORDER BY e.id COLLATE "C"), ''))
			FROM endpoints e WHERE e.project_id = t.p AND e.deleted_at IS NULL
				AND (e.id = ANY($12) OR e.status = 'active' AND (e.event_types = '{}' OR e.event_types && $13::text[])))
	), taken AS MATERIALIZED (
		SELECT t.req, t.x, e.event_id AS id
		FROM unnest($14::int8[], $15::text[]) AS t(req, x)
			JOIN event_external_ids e ON e.project_id = ($1::text[])[t.req] AND e.external_id = t.x
	), ready AS MATERIALIZED (
		SELECT r.* FROM req r
		WHERE r.project_id = ANY (ARRAY(SELECT p FROM fresh)) AND r.ord <> ALL (ARRAY(SELECT req FROM taken))
	), locked AS MATERIALIZED (
		SELECT r.* FROM ready r
		WHERE r.key <> '' AND ` + lockKey + `
	), claim AS (
		INSERT INTO idempotency_records (project_id, key, fingerprint, created_at, expires_at,
			status_code, content_type, response_body)
		SELECT project_id, key, fp, at, expires, code, ctype, body FROM locked WHERE remember
		ON CONFLICT (project_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
			status_code = EXCLUDED.status_code, content_type = EXCLUDED.content_type,
			response_body = EXCLUDED.response_body, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
		WHERE idempotency_records.expires_at <= EXCLUDED.created_at
		RETURNING project_id, key
	), go AS MATERIALIZED (
		SELECT ord FROM ready WHERE key = ''
		UNION ALL SELECT l.ord FROM locked l JOIN claim c ON c.project_id = l.project_id AND c.key = l.key
	), ev AS (
		INSERT INTO events (id, project_id, type, data, external_id, created_at, trace_parent)
		SELECT id, prj, typ, data::json, ext, at, NULLIF(tp, '')
		FROM unnest($16::text[], $17::text[], $18::text[], $19::text[], $20::text[], $21::timestamptz[], $22::int8[],
			$32::text[]) AS t(id, prj, typ, data, ext, at, req, tp)
		WHERE t.req = ANY (ARRAY(SELECT ord FROM go))
		RETURNING id, project_id, external_id
	), xid AS ( -- external ids are unique per project here: events are partitioned by id
		INSERT INTO event_external_ids (project_id, external_id, event_id)
		SELECT project_id, external_id, id FROM ev WHERE external_id IS NOT NULL
	), dl AS (
		INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, trigger, status, next_attempt_at, created_at,
			updated_at, fifo_seq)
		SELECT id, prj, ev, ep, typ, trig, 'pending', due, due, due, CASE WHEN fifo THEN nextval('deliveries_fifo_seq') END
		FROM unnest($23::text[], $24::text[], $25::text[], $26::text[], $27::text[], $28::text[], $29::timestamptz[], $30::bool[],
			$31::int8[]) WITH ORDINALITY AS t(id, prj, ev, ep, typ, trig, due, fifo, req, ord)
		WHERE t.req = ANY (ARRAY(SELECT ord FROM go))
		ORDER BY ord
	), stored AS (
		SELECT r.ord, i.fingerprint, i.status_code, i.content_type, i.response_body
		FROM req r JOIN idempotency_records i ON i.project_id = r.project_id AND i.key = r.key
		WHERE r.key <> '' AND r.ord <> ALL (ARRAY(SELECT ord FROM go))
			AND i.status_code IS NOT NULL AND i.expires_at > r.at
	)
	SELECT 1, ord, NULL::text, NULL::text, NULL::text, NULL::bytea, NULL::int4, NULL::text, NULL::bytea FROM go
	UNION ALL SELECT 2, ord, NULL, NULL, NULL, fingerprint, status_code, content_type, response_body FROM stored
	UNION ALL SELECT CASE WHEN remember THEN 3 ELSE 4 END, ord, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM locked
	UNION ALL SELECT 5, NULL, p, NULL, NULL, NULL, NULL, NULL, NULL FROM fresh
	UNION ALL SELECT 6, req, NULL, x, id, NULL, NULL, NULL, NULL FROM taken`

// write adds the events of c, which claimed its key, and their deliveries
// to r, and returns them; or it returns the client error that leaves them
// unwritten: the body's own (Invalid), an unknown endpoint id, an external
// id taken before or by an earlier request of the group. eps are the
// endpoints of c's project that can match.
func (r *eventRows) write(c *ingestCall, eps []endpointMatch) ([]webhookd.Event, error) {
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
		if id, ok := c.taken[*ev.ExternalID]; ok {
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
	d, from := &r.deliveries, len(r.deliveries.fifo)
	evs := r.add(c.k.project, c.req.Events, targets, fifo, c.req.Now)
	// A test event is made at once (SPEC): its deliveries take no place in
	// an ordered endpoint's queue, where they would wait behind a failing
	// head, and hold up every later event while they waited.
	for i := from; i < len(d.fifo); i++ {
		d.fifo[i] = d.fifo[i] && d.triggers[i] != webhookd.TriggerTest
	}
	return evs, nil
}
