package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/warm"
)

// IngestRequest is one event request behind an Idempotency-Key, as an
// Ingester takes it.
type IngestRequest struct {
	Key    IdempotencyKey
	Events []NewEvent
	Now    time.Time
	// FieldPrefix names event i's place in error fields ("events[3]."
	// in a batch).
	FieldPrefix func(int) string
	// Render makes the response to remember: of the events written, or of
	// the client error (a *webhookd.Error) that leaves nothing written.
	Render func(evs []webhookd.Event, err error) (StoredResponse, error)
}

// ErrIngestAlone tells that an Ingester did not take a request: its key
// was used before (a replay, a mismatch), its group could not commit, or
// it raced another request of its group. Run it on its own with
// WithIdempotency, which gives it the answer it would have had alone.
var ErrIngestAlone = errors.New("storage: run this ingest on its own")

// Ingester commits concurrent event requests together: one transaction of
// two round trips for a group instead of one per request. Each request
// keeps its own outcome: a client error is remembered for its key and
// writes nothing, as WithIdempotency would. Groups form of their own: while
// the groups in flight run, new requests queue for the next one.
type Ingester struct {
	db        *DB
	parallel  int // groups in flight at once, at most
	maxEvents int // events in one group, unless one request alone has more

	mu      sync.Mutex
	pending []*ingestCall
	running int                    // groups in flight
	opening bool                   // a group is in its first round trip
	keys    map[ikey]chan struct{} // keys in a group now; closed when it ends
	groups  int64                  // groups run (guarded by mu; for tests)
	fast    int64                  // groups committed in one round trip (guarded by mu; for tests)

	endpoints endpointCache // for one-round-trip groups (ingest_fast.go)
	warm      *warm.Pool    // runs the groups, on stacks grown by the ones before

	beforeGroup func(n int) // tests: called as a group of n begins
	afterOpen   func()      // tests: called once a group's first round trip is back and the next may begin
}

// NewIngester returns an Ingester running at most parallel groups at once.
//
// Single-event requests run one group at a time: a group waiting to begin
// gathers every request that arrives meanwhile, and larger groups cost less
// per request (16 clients posting single events: one group at a time took
// about 5 % more requests per second than two or more). While many events
// wait (largeBacklog: batches), groups overlap in a pipeline: the next
// begins once the one before has made its first round trip (claims,
// endpoint matches), so its first round trip runs beside the other's
// second (writes and commit); after a group that commits in one round
// trip (commitFast), as soon as that is sent.
func (db *DB) NewIngester(parallel int) *Ingester {
	return &Ingester{db: db, parallel: max(parallel, 1), maxEvents: 2000, keys: map[ikey]chan struct{}{},
		warm: warm.New(time.Minute)}
}

type ikey struct{ project, key string }

type ingestCall struct {
	req  IngestRequest
	k    ikey
	resp StoredResponse
	evs  []webhookd.Event
	err  error
	done chan struct{}
	// finished and abandoned (guarded by Ingester.mu) settle who releases
	// the key of a call that ends with ErrIngestAlone: its caller, or the
	// group when the caller left.
	finished, abandoned bool
}

// claimKeys claims idempotency keys ($1 projects, $2 keys, $3
// fingerprints, $4 created, $5 expiry): a new key, or one whose record has
// expired, is claimed and returned; a live record is left alone. A key a
// running request holds waits for that request's row lock.
const claimKeys = `
	INSERT INTO idempotency_records (project_id, key, fingerprint, created_at, expires_at)
	SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::timestamptz[], $5::timestamptz[])
	ON CONFLICT (project_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
		status_code = NULL, content_type = NULL, response_body = NULL,
		created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
	WHERE idempotency_records.expires_at <= EXCLUDED.created_at
	RETURNING project_id, key`

// matchCandidates reads the endpoints of projects $1 that events can go
// to: those listed by id ($2), and the active ones subscribed to one of
// the types $3 or to all (collectEndpointMatches reads the rows).
const matchCandidates = `
	SELECT project_id, id, event_types, status = 'active' FROM endpoints
	WHERE project_id = ANY($1) AND deleted_at IS NULL
	AND (id = ANY($2) OR status = 'active' AND (event_types = '{}' OR event_types && $3::text[]))
	ORDER BY project_id, id`

// groupTimeout bounds one group's transaction.
const groupTimeout = 10 * time.Second

// Ingest writes req's events and their deliveries and remembers the
// response for its key, in a transaction shared with concurrent requests.
// It returns the response and, when it is a success, the events.
//
// With ErrIngestAlone the caller runs the request alone and then calls
// release: until then the key stays reserved in this process, so a repeat
// that arrives meanwhile waits for that run as it would for a group, at
// most wait and without a connection; it then runs alone too (and
// replays, or waits its turn in WithIdempotency). release is never nil.
func (g *Ingester) Ingest(ctx context.Context, req IngestRequest, wait time.Duration) (resp StoredResponse, evs []webhookd.Event, release func(), err error) {
	c := &ingestCall{req: req, k: ikey{req.Key.ProjectID, req.Key.Key}, done: make(chan struct{})}
	g.mu.Lock()
	if busy, ok := g.keys[c.k]; ok {
		g.mu.Unlock()
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-busy:
		case <-t.C:
		case <-ctx.Done():
			return StoredResponse{}, nil, func() {}, ctx.Err()
		}
		return StoredResponse{}, nil, func() {}, ErrIngestAlone
	}
	g.keys[c.k] = make(chan struct{})
	g.pending = append(g.pending, c)
	g.startLocked()
	g.mu.Unlock()
	select {
	case <-c.done:
		if c.err == ErrIngestAlone {
			var once sync.Once
			return c.resp, nil, func() { once.Do(func() { g.release(c.k) }) }, c.err
		}
		return c.resp, c.evs, func() {}, c.err
	case <-ctx.Done(): // the group goes on; a repeat replays what it commits
		g.mu.Lock()
		c.abandoned = true
		if c.finished && c.err == ErrIngestAlone {
			g.releaseLocked(c.k)
		}
		g.mu.Unlock()
		return StoredResponse{}, nil, func() {}, ctx.Err()
	}
}

// startLocked begins a group of what is pending: when none is in flight,
// or beside those in flight when many events wait (largeBacklog), none is
// in its first round trip and fewer than parallel are in flight.
func (g *Ingester) startLocked() {
	if len(g.pending) == 0 || g.running > 0 && (g.opening || g.running >= g.parallel || g.backlogLocked() < largeBacklog) {
		return
	}
	n, events := 0, 0
	for n < len(g.pending) && (n == 0 || events+len(g.pending[n].req.Events) <= g.maxEvents) {
		events += len(g.pending[n].req.Events)
		n++
	}
	group := g.pending[:n:n]
	g.pending = g.pending[n:]
	g.running++
	g.opening = true
	g.groups++
	g.warm.Go(func() { g.run(group) })
}

// largeBacklog is how many waiting events begin a group beside those in
// flight.
const largeBacklog = 100

// backlogLocked counts the events waiting for a group.
func (g *Ingester) backlogLocked() int {
	n := 0
	for _, c := range g.pending {
		n += len(c.req.Events)
	}
	return n
}

// storedResponses are the idempotency records a group writes: a key's
// claim and its response, as columns.
type storedResponses struct {
	projects, keys, types []string
	fps, bodies           [][]byte
	created, expires      []time.Time
	codes                 []int32
}

func (r *storedResponses) add(c *ingestCall, resp StoredResponse, box *secretBox) {
	r.projects, r.keys = append(r.projects, c.k.project), append(r.keys, c.k.key)
	r.codes, r.types = append(r.codes, int32(resp.StatusCode)), append(r.types, resp.ContentType)
	r.bodies = append(r.bodies, box.seal(resp.Body)) // it may hold a secret
	r.fps, r.created = append(r.fps, c.req.Key.Fingerprint[:]), append(r.created, c.req.Now)
	r.expires = append(r.expires, c.req.Now.Add(c.req.Key.TTL))
}

// args are the columns in the order of idempotency_records (project_id,
// key, fingerprint, created_at, expires_at, status_code, content_type,
// response_body).
func (r *storedResponses) args() []any {
	return []any{r.projects, r.keys, r.fps, r.created, r.expires, r.codes, r.types, r.bodies}
}

func (g *Ingester) release(k ikey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releaseLocked(k)
}

func (g *Ingester) releaseLocked(k ikey) {
	close(g.keys[k])
	delete(g.keys, k)
}

// run commits group; once its first round trip is back, the next group
// may begin.
func (g *Ingester) run(group []*ingestCall) {
	if g.beforeGroup != nil {
		g.beforeGroup(len(group))
	}
	opened := sync.OnceFunc(func() {
		g.mu.Lock()
		g.opening = false
		g.startLocked()
		g.mu.Unlock()
		if g.afterOpen != nil {
			g.afterOpen()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	if err := g.commit(ctx, group, opened); err != nil {
		for _, c := range group {
			c.resp, c.evs, c.err = StoredResponse{}, nil, ErrIngestAlone
		}
	}
	cancel()
	opened() // if commit failed before its first round trip was back
	g.mu.Lock()
	for _, c := range group {
		c.finished = true
		if c.err != ErrIngestAlone || c.abandoned { // else the caller releases it after its run alone
			g.releaseLocked(c.k)
		}
	}
	g.running--
	g.startLocked()
	g.mu.Unlock()
	for _, c := range group {
		close(c.done)
	}
}

// commit runs one group, in one round trip if it can (commitFast). Else
// its first round trip begins the transaction,
// claims every key, reads the endpoints that can match and the external
// ids taken; its second writes what the requests that claimed their key
// made, with their responses, and commits. An error fails the whole group
// (each request then runs alone). opened is called as the first round
// trip returns (or, in one round trip, as it is sent).
func (g *Ingester) commit(ctx context.Context, group []*ingestCall, opened func()) error {
	conn, err := g.db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release() // pgxpool drops a connection left in a transaction
	if tried, err := g.commitFast(ctx, conn, group, opened); tried && err == nil {
		g.mu.Lock()
		g.fast++
		g.mu.Unlock()
		return nil
	}
	tx := &connTx{c: conn}
	defer tx.Rollback(ctx)

	var (
		projects, keys      []string
		fps                 [][]byte
		created, expires    []time.Time
		listed, types       []string
		extProjects, extIDs []string
		claimed             = map[ikey]bool{}
		eps                 []endpointMatch
		taken               = map[ikey]string{} // (project, external id) → event id
		projectSeen         = map[string]bool{}
		candidateProjects   []string
		anyExternal         bool
	)
	for _, c := range group {
		k := c.req.Key
		projects, keys, fps = append(projects, k.ProjectID), append(keys, k.Key), append(fps, k.Fingerprint[:])
		created, expires = append(created, c.req.Now), append(expires, c.req.Now.Add(k.TTL))
		if !projectSeen[k.ProjectID] {
			projectSeen[k.ProjectID] = true
			candidateProjects = append(candidateProjects, k.ProjectID)
		}
		for _, ev := range c.req.Events {
			listed = append(listed, ev.EndpointIDs...)
			types = append(types, ev.Type)
			if ev.ExternalID != nil {
				extProjects, extIDs = append(extProjects, k.ProjectID), append(extIDs, *ev.ExternalID)
				anyExternal = true
			}
		}
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// Another process's request with one of these keys, or with one of
	// these external ids, holds its row only briefly; past 200 ms the
	// group gives up and its requests run alone. And the statements run
	// generic plans (planSettings).
	b.Queue(`SELECT set_config('lock_timeout', '200', true), ` + genericPlans)
	b.Queue(claimKeys, projects, keys, fps, created, expires).Query(func(rows pgx.Rows) error {
		var k ikey
		_, err := pgx.ForEachRow(rows, []any{&k.project, &k.key}, func() error { claimed[k] = true; return nil })
		return err
	})
	b.Queue(matchCandidates, candidateProjects, listed, types).Query(func(rows pgx.Rows) (err error) {
		eps, err = collectEndpointMatches(rows)
		return err
	})
	if anyExternal {
		b.Queue(`SELECT e.project_id, e.external_id, e.id FROM events e
			JOIN unnest($1::text[], $2::text[]) AS t(p, x) ON e.project_id = t.p AND e.external_id = t.x`,
			extProjects, extIDs).Query(func(rows pgx.Rows) error {
			var k ikey
			var id string
			_, err := pgx.ForEachRow(rows, []any{&k.project, &k.key, &id}, func() error { taken[k] = id; return nil })
			return err
		})
	}
	err = conn.SendBatch(ctx, b).Close()
	opened()
	if err != nil {
		return err
	}

	var (
		evIDs, evProjects, evTypes, evData []string
		evExt                              []*string
		evAt                               []time.Time
		rows                               deliveryRows
		stored                             storedResponses
		released                           struct{ projects, keys []string }
		inGroup                            = map[ikey]bool{} // external ids this group writes
	)
	for _, c := range group {
		if !claimed[c.k] {
			c.err = ErrIngestAlone // a replay or a mismatch
			continue
		}
		p := c.k.project
		var mine []endpointMatch
		for _, e := range eps {
			if e.projectID == p {
				mine = append(mine, e)
			}
		}
		targets, err := matchEndpoints(c.req.Events, mine, c.req.FieldPrefix)
		alone := false
		for _, ev := range c.req.Events {
			if ev.ExternalID == nil || err != nil {
				continue
			}
			x := ikey{p, *ev.ExternalID}
			if id, ok := taken[x]; ok {
				err = &webhookd.Error{Code: webhookd.CodeExternalIDTaken, ExistingID: id,
					Message: fmt.Sprintf("an event with external_id %q exists already", *ev.ExternalID)}
			} else if inGroup[x] {
				alone = true // it meets the other's event once this group commits
			}
		}
		if alone {
			c.err = ErrIngestAlone
			released.projects, released.keys = append(released.projects, p), append(released.keys, c.k.key)
			continue
		}
		var evs []webhookd.Event
		if err == nil {
			ids := make([]string, len(c.req.Events))
			for i, ev := range c.req.Events {
				ids[i] = newID(prefixEvent)
				evIDs, evProjects, evTypes = append(evIDs, ids[i]), append(evProjects, p), append(evTypes, ev.Type)
				evData, evExt, evAt = append(evData, string(ev.Data)), append(evExt, ev.ExternalID), append(evAt, c.req.Now)
				if ev.ExternalID != nil {
					inGroup[ikey{p, *ev.ExternalID}] = true
				}
			}
			evs = rows.add(p, c.req.Events, ids, targets, c.req.Now)
		}
		resp, rerr := c.req.Render(evs, err)
		if rerr != nil || !resp.remembered() {
			if err == nil { // its writes are in the arrays already: the group cannot drop them
				return fmt.Errorf("render ingest response: %v", rerr)
			}
			c.resp, c.err = resp, rerr
			released.projects, released.keys = append(released.projects, p), append(released.keys, c.k.key)
			continue
		}
		c.resp = resp
		if err == nil {
			c.evs = evs
		}
		stored.add(c, resp, g.db.box)
	}

	b = &pgx.Batch{}
	if len(evIDs) > 0 {
		b.Queue(`INSERT INTO events (id, project_id, type, data, external_id, created_at)
			SELECT id, prj, typ, data::json, ext, at
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
				AS t(id, prj, typ, data, ext, at)`, evIDs, evProjects, evTypes, evData, evExt, evAt)
	}
	if len(rows.ids) > 0 {
		b.Queue(insertDeliveries, rows.args()...)
	}
	if len(stored.keys) > 0 {
		// The records are this transaction's own (claimed above): each row
		// finds its record through the key's index, with no join for the
		// planner to get wrong while the table is young and unanalyzed.
		b.Queue(`INSERT INTO idempotency_records (project_id, key, fingerprint, created_at, expires_at,
				status_code, content_type, response_body)
			SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::timestamptz[], $5::timestamptz[],
				$6::int4[], $7::text[], $8::bytea[])
			ON CONFLICT (project_id, key) DO UPDATE SET status_code = EXCLUDED.status_code,
				content_type = EXCLUDED.content_type, response_body = EXCLUDED.response_body`,
			stored.args()...)
	}
	if len(released.keys) > 0 {
		b.Queue(`DELETE FROM idempotency_records r USING unnest($1::text[], $2::text[]) AS t(prj, key)
			WHERE r.project_id = t.prj AND r.key = t.key`, released.projects, released.keys)
	}
	var tag pgconn.CommandTag
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		return pgx.ErrTxCommitRollback
	}
	tx.committed()
	return nil
}
