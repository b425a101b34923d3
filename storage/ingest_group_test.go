package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// ingestOutcome is what one Ingest call returned.
type ingestOutcome struct {
	resp     storage.StoredResponse
	replayed bool
	evs      []webhookd.Event
	err      error
}

func ingest(g *storage.Ingester, req storage.IngestRequest, wait time.Duration) ingestOutcome {
	res, err := g.Ingest(context.Background(), req, wait)
	return ingestOutcome{res.Response, res.Replayed, res.Events, err}
}

// renderIngest answers 202 with the event ids, or the client error's code
// and existing id.
func renderIngest(evs []webhookd.Event, err error) (storage.StoredResponse, error) {
	if err != nil {
		var we *webhookd.Error
		if !errors.As(err, &we) {
			return storage.StoredResponse{}, err
		}
		status := 400
		if we.Code == webhookd.CodeExternalIDTaken {
			status = 409
		}
		body, _ := json.Marshal(map[string]string{"code": we.Code, "existing_id": we.ExistingID, "field": we.Field})
		return storage.StoredResponse{StatusCode: status, ContentType: "application/json", Body: body}, nil
	}
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	body, _ := json.Marshal(ids)
	return storage.StoredResponse{StatusCode: 202, ContentType: "application/json", Body: body}, nil
}

func ingestRequest(projectID, key string, evs ...storage.NewEvent) storage.IngestRequest {
	return storage.IngestRequest{
		Key:    storage.IdempotencyKey{ProjectID: projectID, Key: key, TTL: time.Hour, Fingerprint: [32]byte{byte(len(key))}},
		Events: evs, Now: time.Now(), FieldPrefix: func(int) string { return "" }, Render: renderIngest,
	}
}

// groupOf runs reqs through g as one group: the first group is held until
// the others queue behind it, so all but the first share the second.
func groupOf(t *testing.T, db *storage.DB, reqs []storage.IngestRequest) (*storage.Ingester, []ingestOutcome) {
	t.Helper()
	g := db.NewIngester(1)
	hold := make(chan struct{})
	var once sync.Once
	storage.SetBeforeGroup(g, func(int) { once.Do(func() { <-hold }) })
	out := make([]ingestOutcome, len(reqs))
	var wg sync.WaitGroup
	run := func(i int) { out[i] = ingest(g, reqs[i], time.Second) }
	wg.Go(func() { run(0) })
	within(t, 5*time.Second, func() bool { return storage.Groups(g) == 1 })
	for i := 1; i < len(reqs); i++ {
		wg.Go(func() { run(i) })
	}
	within(t, 5*time.Second, func() bool { return storage.PendingIngests(g) == len(reqs)-1 })
	close(hold)
	wg.Wait()
	return g, out
}

// within polls cond until it holds, failing the test after d.
func within(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
	}
}

func ingestProject(t *testing.T, db *storage.DB) (projectID, endpointID string) {
	t.Helper()
	ctx, s := context.Background(), db.Store()
	_, p, err := s.CreateAPIKey(ctx, "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := s.CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: "http://127.0.0.1:9/", Secret: "whsec_AAAA"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p.ID, ep.ID
}

// numberedEvent is an event of type a with data n.
func numberedEvent(n int) storage.NewEvent {
	return storage.NewEvent{Type: "a", Data: json.RawMessage(fmt.Sprint(n))}
}

// ingestAccepted runs req through g in a goroutine of wg and reports an
// error unless it is accepted (202).
func ingestAccepted(t *testing.T, wg *sync.WaitGroup, g *storage.Ingester, req storage.IngestRequest) {
	wg.Go(func() {
		if o := ingest(g, req, time.Second); o.err != nil || o.resp.StatusCode != 202 {
			t.Errorf("%s: %d %v", req.Key.Key, o.resp.StatusCode, o.err)
		}
	})
}

func count(t *testing.T, db *storage.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIngesterCommitsAGroupTogether: concurrent requests share a group, and
// each gets its events, one delivery per endpoint, and its response
// remembered; a client error in the group is remembered for its key and
// writes nothing, without touching the others.
func TestIngesterCommitsAGroupTogether(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	p, ep := ingestProject(t, db)
	ctx := context.Background()
	taken := "taken"
	old, err := db.Store().CreateEvents(ctx, p, []storage.NewEvent{{Type: "a", Data: json.RawMessage("0"), ExternalID: &taken}},
		time.Now(), func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ev := numberedEvent
	reqs := []storage.IngestRequest{ingestRequest(p, "first", ev(0))}
	for i := range 10 {
		reqs = append(reqs, ingestRequest(p, fmt.Sprintf("ok-%d", i), ev(i), ev(i+100)))
	}
	unknown := ev(7)
	unknown.EndpointIDs = []string{"ep_NOPE"}
	reqs = append(reqs, ingestRequest(p, "unknown-endpoint", ev(1), unknown))
	reqs = append(reqs, ingestRequest(p, "taken", storage.NewEvent{Type: "a", Data: json.RawMessage("1"), ExternalID: &taken}))

	g, out := groupOf(t, db, reqs)
	// The request whose external id was taken learns it in the group and
	// renders its 409 in the next.
	if got := storage.Groups(g); got != 3 {
		t.Fatalf("%d groups, want 3", got)
	}
	for i, o := range out[:11] {
		if o.err != nil || o.resp.StatusCode != 202 || len(o.evs) != len(reqs[i].Events) {
			t.Fatalf("request %d: %+v", i, o)
		}
		for _, e := range o.evs {
			if len(e.Deliveries) != 1 || e.Deliveries[0].EndpointID != ep {
				t.Fatalf("request %d: deliveries %+v", i, e.Deliveries)
			}
		}
	}
	if o := out[11]; o.err != nil || o.resp.StatusCode != 400 || o.evs != nil {
		t.Fatalf("unknown endpoint: %+v", o)
	}
	if o := out[12]; o.err != nil || o.resp.StatusCode != 409 || !json.Valid(o.resp.Body) ||
		string(o.resp.Body) != fmt.Sprintf(`{"code":"external_id_taken","existing_id":%q,"field":""}`, old[0].ID) {
		t.Fatalf("external id taken: %+v %s", o, o.resp.Body)
	}
	if n := count(t, db, `SELECT count(*) FROM events`); n != 1+1+20 {
		t.Fatalf("%d events, want 22", n)
	}
	if n := count(t, db, `SELECT count(*) FROM deliveries WHERE status = 'pending' AND next_attempt_at IS NOT NULL`); n != 1+1+20 {
		t.Fatalf("%d pending deliveries, want 22", n)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_records WHERE status_code IS NOT NULL`); n != len(reqs) {
		t.Fatalf("%d stored responses, want %d", n, len(reqs))
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_records WHERE key = 'unknown-endpoint' AND status_code = 400`); n != 1 {
		t.Fatal("the 400 is not remembered")
	}
}

// TestIngesterAnswersRepeatsInTheGroup: a key used before is answered in
// the group from its record (replayed, or a mismatch), and of two requests
// of a group with one external id the first commits and the second gets
// external_id_taken naming the first's event; only the first writes.
func TestIngesterAnswersRepeatsInTheGroup(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	p, _ := ingestProject(t, db)
	used := ingestRequest(p, "used", storage.NewEvent{Type: "a", Data: json.RawMessage("1")})
	first := ingest(db.NewIngester(1), used, time.Second)
	if first.err != nil || first.resp.StatusCode != 202 || first.replayed {
		t.Fatalf("first: %+v", first)
	}
	mismatch := used
	mismatch.Key.Fingerprint = [32]byte{99}
	x := "same"
	same := storage.NewEvent{Type: "a", Data: json.RawMessage("2"), ExternalID: &x}
	_, out := groupOf(t, db, []storage.IngestRequest{
		ingestRequest(p, "lead", storage.NewEvent{Type: "a", Data: json.RawMessage("0")}),
		used, ingestRequest(p, "x1", same), ingestRequest(p, "x2", same),
	})
	if out[0].err != nil || out[0].resp.StatusCode != 202 {
		t.Fatalf("lead: %+v", out[0])
	}
	if o := out[1]; o.err != nil || !o.replayed || string(o.resp.Body) != string(first.resp.Body) || o.evs != nil {
		t.Fatalf("used key: %+v, want the first response replayed", o)
	}
	// The pair queued in either order: the one first in the group commits.
	a, b := out[2], out[3]
	if a.resp.StatusCode != 202 {
		a, b = b, a
	}
	if a.err != nil || a.resp.StatusCode != 202 || b.err != nil || b.resp.StatusCode != 409 ||
		!strings.Contains(string(b.resp.Body), a.evs[0].ID) {
		t.Fatalf("pair: %+v and %+v, want 202 and 409 naming the first's event", a, b)
	}
	if n := count(t, db, `SELECT count(*) FROM events`); n != 3 {
		t.Fatalf("%d events, want 3", n)
	}
	if o := ingest(db.NewIngester(1), mismatch, time.Second); webhookd.ErrorCode(o.err) != webhookd.CodeIdempotencyKeyMismatch {
		t.Fatalf("another body on a used key: %+v", o)
	}
}

// TestIngesterGroupClaimsExpiredAndForgets5xx: in one group, a key whose
// record has expired is claimed anew (its work done, not replayed), and a
// request answered 503 gets its answer, writes nothing and leaves its key
// free for the next try (SPEC §2: 5xx is not remembered).
func TestIngesterGroupClaimsExpiredAndForgets5xx(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	p, _ := ingestProject(t, db)
	stale := ingestRequest(p, "stale", numberedEvent(1))
	stale.Now = time.Now().Add(-2 * time.Hour) // its record expired an hour ago
	if o := ingest(db.NewIngester(1), stale, time.Second); o.err != nil || o.resp.StatusCode != 202 {
		t.Fatalf("first: %+v", o)
	}
	again := ingestRequest(p, "stale", numberedEvent(2))
	again.Key.Fingerprint = [32]byte{42} // another body: a live record would answer it with a mismatch
	down := ingestRequest(p, "down", numberedEvent(3))
	down.Render = func([]webhookd.Event, error) (storage.StoredResponse, error) {
		return storage.StoredResponse{StatusCode: 503, ContentType: "application/json", Body: []byte(`{}`)}, nil
	}
	_, out := groupOf(t, db, []storage.IngestRequest{ingestRequest(p, "lead", numberedEvent(0)), again, down})
	if o := out[1]; o.err != nil || o.resp.StatusCode != 202 || o.replayed || len(o.evs) != 1 {
		t.Fatalf("expired key: %+v, want its own 202", o)
	}
	if o := out[2]; o.err != nil || o.resp.StatusCode != 503 || o.evs != nil {
		t.Fatalf("503: %+v", o)
	}
	if n := count(t, db, `SELECT count(*) FROM events`); n != 3 { // stale's first, lead, stale's second
		t.Fatalf("%d events, want 3", n)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_records WHERE key = 'down'`); n != 0 {
		t.Fatal("the 503 was remembered")
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_records WHERE key = 'stale' AND fingerprint = $1`,
		again.Key.Fingerprint[:]); n != 1 {
		t.Fatal("the expired record was not replaced")
	}
	retry := ingestRequest(p, "down", numberedEvent(3))
	if o := ingest(db.NewIngester(1), retry, time.Second); o.err != nil || o.resp.StatusCode != 202 || o.replayed {
		t.Fatalf("retry after the 503: %+v", o)
	}
}

// holdKey claims key of project p in a transaction of its own, as another
// process's request still running would, until the returned function is
// called with the response to commit (nil: roll back).
func holdKey(t *testing.T, db *storage.DB, p, key string) func(resp *storage.StoredResponse) {
	t.Helper()
	claimed, finish := make(chan struct{}), make(chan *storage.StoredResponse)
	done := make(chan struct{})
	go func() {
		defer close(done)
		k := ingestRequest(p, key).Key
		_, _, err := db.WithIdempotency(context.Background(), k, time.Now(), time.Second, func(*storage.Store) (storage.StoredResponse, error) {
			close(claimed)
			if r := <-finish; r != nil {
				return *r, nil
			}
			return storage.StoredResponse{}, errors.New("rolled back")
		})
		if err != nil && err.Error() != "rolled back" {
			t.Errorf("holder: %v", err)
		}
	}()
	<-claimed
	return func(r *storage.StoredResponse) { finish <- r; <-done }
}

// TestIngesterBusyKeyLeavesItsGroup: a key another transaction holds does
// not hold up its group: the others commit at once, while it waits, with
// no connection, and then replays what the holder committed; past its
// wait it gets idempotency_key_in_progress, after that one wait.
func TestIngesterBusyKeyLeavesItsGroup(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	p, _ := ingestProject(t, db)
	g := db.NewIngester(1)
	release := holdKey(t, db, p, "busy")
	busy := make(chan ingestOutcome, 1)
	go func() { busy <- ingest(g, ingestRequest(p, "busy", numberedEvent(1)), 10*time.Second) }()
	for i := range 5 {
		if o := ingest(g, ingestRequest(p, fmt.Sprint("free-", i), numberedEvent(i)), time.Second); o.err != nil || o.resp.StatusCode != 202 {
			t.Fatalf("a request beside the busy key: %+v", o)
		}
	}
	select {
	case o := <-busy:
		t.Fatalf("the busy key was answered while held: %+v", o)
	default:
	}
	release(&storage.StoredResponse{StatusCode: 202, ContentType: "application/json", Body: []byte(`{"held":true}`)})
	if o := <-busy; o.err != nil || !o.replayed || string(o.resp.Body) != `{"held":true}` {
		t.Fatalf("the busy key after its holder committed: %+v", o)
	}
	if n := count(t, db, `SELECT count(*) FROM events`); n != 5 {
		t.Fatalf("%d events, want 5", n)
	}

	release = holdKey(t, db, p, "stuck")
	defer release(nil)
	// A wait that ends while its group runs still ends the request.
	short := make(chan ingestOutcome, 1)
	go func() { short <- ingest(g, ingestRequest(p, "stuck", numberedEvent(1)), time.Millisecond) }()
	select {
	case o := <-short:
		if webhookd.ErrorCode(o.err) != webhookd.CodeIdempotencyKeyInProgress {
			t.Fatalf("a key held past a wait that ended in its group: %+v", o)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a request whose wait ended while its group ran is still retrying")
	}
	start := time.Now()
	o := ingest(g, ingestRequest(p, "stuck", numberedEvent(1)), 300*time.Millisecond)
	if took := time.Since(start); webhookd.ErrorCode(o.err) != webhookd.CodeIdempotencyKeyInProgress || took < 300*time.Millisecond || took > 3*time.Second {
		t.Fatalf("a key held past the wait: %+v after %v, want idempotency_key_in_progress after 300ms", o, took)
	}
}

// TestIngesterGroupFailureRunsEachAlone: a group that cannot commit (an
// external id held by another transaction past the group's lock timeout)
// leaves nothing behind; each of its requests runs again alone: the others
// commit, and the one with the held external id waits for it (as long as
// its wait allows, in short turns that hold up nothing else) and then
// gets what the holder left: the id taken, or,
// when the holder rolled back, its event.
func TestIngesterGroupFailureRunsEachAlone(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	p, _ := ingestProject(t, db)
	ctx := context.Background()
	hold := func(t *testing.T, external string) pgx.Tx {
		tx, err := db.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `WITH e AS (INSERT INTO events (id, project_id, type, data, external_id, created_at)
				VALUES ($1, $2, 'a', '1', $3, now()))
			INSERT INTO event_external_ids VALUES ($2, $3, $1)`, "evt_HELD"+external, p, external); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	for _, commit := range []bool{true, false} {
		external := fmt.Sprint("held-", commit)
		tx := hold(t, external)
		reqs := []storage.IngestRequest{
			ingestRequest(p, "lead-"+external, numberedEvent(0)),
			ingestRequest(p, "k-"+external, storage.NewEvent{Type: "a", Data: json.RawMessage("1"), ExternalID: &external}),
			ingestRequest(p, "other-"+external, numberedEvent(2)),
		}
		held := make(chan struct{})
		go func() { // the holder ends once the others have committed
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				var n int
				db.Pool().QueryRow(ctx, `SELECT count(*) FROM idempotency_records WHERE key = $1 AND status_code = 202`,
					"other-"+external).Scan(&n)
				if n > 0 {
					break
				}
			}
			if commit {
				tx.Commit(ctx)
			} else {
				tx.Rollback(ctx)
			}
			close(held)
		}()
		_, out := groupOf(t, db, reqs)
		<-held
		if out[0].err != nil || out[0].resp.StatusCode != 202 || out[2].err != nil || out[2].resp.StatusCode != 202 {
			t.Fatalf("commit %v: the requests beside the held external id: %+v, %+v", commit, out[0], out[2])
		}
		want := 202
		if commit {
			want = 409
		}
		if o := out[1]; o.err != nil || o.resp.StatusCode != want {
			t.Fatalf("commit %v: the held external id: %+v, want %d", commit, o, want)
		}
	}
}

// TestIngesterBeginsTheNextGroupOnceTheFirstIsSent: while a group has
// not sent its round trip, the requests that arrive wait for the next
// group, even with a backlog of 205 events; once it has, the next group
// begins beside it.
func TestIngesterBeginsTheNextGroupOnceTheFirstIsSent(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	p, _ := ingestProject(t, db)
	ev := numberedEvent
	g := db.NewIngester(4)
	beforeFirst, inSecondStage := make(chan struct{}), make(chan struct{})
	var holdOnce, stageOnce sync.Once
	storage.SetBeforeGroup(g, func(int) { holdOnce.Do(func() { <-beforeFirst }) })
	storage.SetAfterOpen(g, func() { stageOnce.Do(func() { <-inSecondStage }) })
	var wg sync.WaitGroup
	ingest := func(req storage.IngestRequest) { ingestAccepted(t, &wg, g, req) }
	ingest(ingestRequest(p, "first", ev(0)))
	within(t, 5*time.Second, func() bool { return storage.Groups(g) == 1 })
	for i := range 5 {
		ingest(ingestRequest(p, fmt.Sprintf("single-%d", i), ev(i)))
	}
	batch := make([]storage.NewEvent, 200)
	for i := range batch {
		batch[i] = ev(i)
	}
	ingest(ingestRequest(p, "batch", batch...))
	within(t, 5*time.Second, func() bool { return storage.PendingIngests(g) == 6 })
	if n := storage.Groups(g); n != 1 {
		t.Fatalf("%d groups began before the first sent its round trip, want 1", n)
	}
	close(beforeFirst) // the first group sends its round trip, then holds
	within(t, 5*time.Second, func() bool { return storage.Groups(g) == 2 && storage.PendingIngests(g) == 0 })
	close(inSecondStage)
	wg.Wait()
	if n := count(t, db, `SELECT count(*) FROM events`); n != 1+5+200 {
		t.Fatalf("%d events, want 206", n)
	}
}

// TestIngesterRunsSingleEventsOneGroupAtATime: requests of one event each
// wait for the group in flight to end, not only until it has sent its round trip.
func TestIngesterRunsSingleEventsOneGroupAtATime(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	p, _ := ingestProject(t, db)
	ev := numberedEvent
	g := db.NewIngester(4)
	inSecondStage := make(chan struct{})
	var once sync.Once
	storage.SetAfterOpen(g, func() { once.Do(func() { <-inSecondStage }) })
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(inSecondStage)
	ingest := func(key string) { ingestAccepted(t, &wg, g, ingestRequest(p, key, ev(0))) }
	ingest("first")
	within(t, 5*time.Second, func() bool { return storage.Groups(g) == 1 })
	for i := range 20 {
		ingest(fmt.Sprintf("single-%d", i))
	}
	within(t, 5*time.Second, func() bool { return storage.PendingIngests(g) == 20 })
	if n := storage.Groups(g); n != 1 {
		t.Fatalf("%d groups began for 20 single events, want 1", n)
	}
}

// TestIngesterSeesEveryEndpointChange: an endpoint created, changed or
// deleted between two requests is matched as it is now, a replayed key
// writes nothing, and a 400 is remembered.
func TestIngesterSeesEveryEndpointChange(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx, s := context.Background(), db.Store()
	p, first := ingestProject(t, db)
	g := db.NewIngester(1)
	n := 0
	run := func(key string, evs ...storage.NewEvent) ingestOutcome {
		return ingest(g, ingestRequest(p, key, evs...), time.Second)
	}
	endpointsOf := func(o ingestOutcome) []string {
		t.Helper()
		if o.err != nil || o.resp.StatusCode != 202 || len(o.evs) != 1 {
			t.Fatalf("%+v", o)
		}
		var ids []string
		for _, d := range o.evs[0].Deliveries {
			ids = append(ids, d.EndpointID)
		}
		slices.Sort(ids)
		return ids
	}
	ev := func() storage.NewEvent {
		n++
		return storage.NewEvent{Type: "a", Data: json.RawMessage(fmt.Sprint(n))}
	}

	if got := endpointsOf(run("k1", ev())); !slices.Equal(got, []string{first}) {
		t.Fatalf("deliveries to %v", got)
	}
	second, err := s.CreateEndpoint(ctx, p, storage.NewEndpoint{URL: "http://127.0.0.1:9/b", Secret: "whsec_BBBB"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := endpointsOf(run("k2", ev())), sortedIDs(first, second.ID); !slices.Equal(got, want) {
		t.Fatalf("after a new endpoint: deliveries to %v, want %v", got, want)
	}
	only := []string{"b"}
	if _, err := s.UpdateEndpoint(ctx, p, first, storage.EndpointPatch{EventTypes: &only}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := endpointsOf(run("k4", ev())); !slices.Equal(got, []string{second.ID}) {
		t.Fatalf("after a change of event types: deliveries to %v", got)
	}
	if err := s.DeleteEndpoint(ctx, p, second.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := endpointsOf(run("k5", ev())); len(got) != 0 {
		t.Fatalf("after a deletion: deliveries to %v", got)
	}

	events := count(t, db, `SELECT count(*) FROM events`)
	if o := run("k5", ev()); o.err != nil || !o.replayed {
		t.Fatalf("a used key: %+v", o)
	}
	if count(t, db, `SELECT count(*) FROM events`) != events {
		t.Fatal("a used key wrote an event")
	}
	unknown := ev()
	unknown.EndpointIDs = []string{"ep_NOPE"}
	if o := run("k6", unknown); o.err != nil || o.resp.StatusCode != 400 || o.evs != nil {
		t.Fatalf("an unknown endpoint: %+v", o)
	}
	if count(t, db, `SELECT count(*) FROM idempotency_records WHERE key = 'k6' AND status_code = 400`) != 1 {
		t.Fatal("the 400 is not remembered")
	}
}

func sortedIDs(ids ...string) []string {
	slices.Sort(ids)
	return ids
}
