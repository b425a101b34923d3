package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// ingestOutcome is what one Ingest call returned.
type ingestOutcome struct {
	resp storage.StoredResponse
	evs  []webhookd.Event
	err  error
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
	run := func(i int) {
		resp, evs, release, err := g.Ingest(context.Background(), reqs[i], time.Second)
		release()
		out[i] = ingestOutcome{resp, evs, err}
	}
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
		resp, _, release, err := g.Ingest(context.Background(), req, time.Second)
		release()
		if err != nil || resp.StatusCode != 202 {
			t.Errorf("%s: %d %v", req.Key.Key, resp.StatusCode, err)
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
	if got := storage.Groups(g); got != 2 {
		t.Fatalf("%d groups, want 2", got)
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

// TestIngesterSendsWhatItCannotTakeAlone: a key used before (a replay, a
// mismatch) and the second of two requests of a group with one external
// id come back with ErrIngestAlone and write nothing; the first of the
// pair commits.
func TestIngesterSendsWhatItCannotTakeAlone(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	p, _ := ingestProject(t, db)
	ctx := context.Background()
	used := ingestRequest(p, "used", storage.NewEvent{Type: "a", Data: json.RawMessage("1")})
	if _, _, err := db.WithIdempotency(ctx, used.Key, time.Now(), time.Second, func(*storage.Store) (storage.StoredResponse, error) {
		return storage.StoredResponse{StatusCode: 202, Body: []byte("{}")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	x := "same"
	same := storage.NewEvent{Type: "a", Data: json.RawMessage("2"), ExternalID: &x}
	_, out := groupOf(t, db, []storage.IngestRequest{
		ingestRequest(p, "lead", storage.NewEvent{Type: "a", Data: json.RawMessage("0")}),
		used, ingestRequest(p, "x1", same), ingestRequest(p, "x2", same),
	})
	if out[0].err != nil || !errors.Is(out[1].err, storage.ErrIngestAlone) {
		t.Fatalf("lead: %v; used key: %v, want ErrIngestAlone", out[0].err, out[1].err)
	}
	// The pair queued in either order: the one first in the group commits.
	first, second := out[2], out[3]
	if first.err != nil {
		first, second = second, first
	}
	if first.err != nil || !errors.Is(second.err, storage.ErrIngestAlone) {
		t.Fatalf("pair: %v and %v, want one nil and one ErrIngestAlone", out[2].err, out[3].err)
	}
	if n := count(t, db, `SELECT count(*) FROM events`); n != 2 {
		t.Fatalf("%d events, want 2", n)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_records WHERE key IN ('x1', 'x2')`); n != 1 {
		t.Fatal("the request sent alone kept its key")
	}
}

// TestIngesterGroupFailureSendsEachAlone: a group that cannot commit (an
// external id held by another transaction past the lock timeout) leaves
// nothing behind, and each of its requests is sent alone; a repeat of one
// of them waits for that run instead of racing it.
func TestIngesterGroupFailureSendsEachAlone(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	p, _ := ingestProject(t, db)
	ctx := context.Background()
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO events (id, project_id, type, data, external_id, created_at)
		VALUES ('evt_HELD', $1, 'a', '1', 'held', now())`, p); err != nil {
		t.Fatal(err)
	}
	held := "held"
	g := db.NewIngester(1)
	req := ingestRequest(p, "k", storage.NewEvent{Type: "a", Data: json.RawMessage("1"), ExternalID: &held})
	_, _, release, err := g.Ingest(ctx, req, time.Second)
	if !errors.Is(err, storage.ErrIngestAlone) {
		t.Fatalf("err %v, want ErrIngestAlone", err)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_records`); n != 0 {
		t.Fatalf("%d records left by the failed group", n)
	}
	// Until release, a repeat waits (here past its wait) and is sent alone.
	start := time.Now()
	if _, _, _, err := g.Ingest(ctx, req, 50*time.Millisecond); !errors.Is(err, storage.ErrIngestAlone) || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("repeat: err %v after %v", err, time.Since(start))
	}
	release()
	tx.Rollback(ctx)
	resp, evs, release, err := g.Ingest(ctx, req, time.Second)
	release()
	if err != nil || resp.StatusCode != 202 || len(evs) != 1 {
		t.Fatalf("after release: %+v %v", resp, err)
	}
}

// TestIngesterBeginsTheNextGroupAfterTheFirstRoundTrip: while a group has
// not made its first round trip, the requests that arrive wait for the next
// group, even with a backlog of 205 events; once it has, the next group
// begins beside it.
func TestIngesterBeginsTheNextGroupAfterTheFirstRoundTrip(t *testing.T) {
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
		t.Fatalf("%d groups began before the first made its first round trip, want 1", n)
	}
	close(beforeFirst) // the first group makes its first round trip, then holds
	within(t, 5*time.Second, func() bool { return storage.Groups(g) == 2 && storage.PendingIngests(g) == 0 })
	close(inSecondStage)
	wg.Wait()
	if n := count(t, db, `SELECT count(*) FROM events`); n != 1+5+200 {
		t.Fatalf("%d events, want 206", n)
	}
}

// TestIngesterRunsSingleEventsOneGroupAtATime: requests of one event each
// wait for the group in flight to end, not only for its first round trip.
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

// TestIngesterOneRoundTripSeesEveryEndpointChange: once a project's
// endpoints are read, its groups commit in one round trip; an endpoint
// created, changed or deleted since then is seen all the same (the group
// finds the change in its transaction and runs the two round trips), and a
// replayed key writes nothing.
func TestIngesterOneRoundTripSeesEveryEndpointChange(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx, s := context.Background(), db.Store()
	p, first := ingestProject(t, db)
	g := db.NewIngester(1)
	n := 0
	ingest := func(key string, evs ...storage.NewEvent) ingestOutcome {
		t.Helper()
		resp, out, release, err := g.Ingest(ctx, ingestRequest(p, key, evs...), time.Second)
		release()
		return ingestOutcome{resp, out, err}
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

	if got := endpointsOf(ingest("k1", ev())); !slices.Equal(got, []string{first}) {
		t.Fatalf("deliveries to %v", got)
	}
	fast := storage.FastGroups(g)
	if fast != 1 {
		t.Fatalf("%d groups in one round trip, want 1", fast)
	}

	second, err := s.CreateEndpoint(ctx, p, storage.NewEndpoint{URL: "http://127.0.0.1:9/b", Secret: "whsec_BBBB"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := endpointsOf(ingest("k2", ev())), sortedIDs(first, second.ID); !slices.Equal(got, want) {
		t.Fatalf("after a new endpoint: deliveries to %v, want %v", got, want)
	}
	if storage.FastGroups(g) != fast {
		t.Fatal("a group matched endpoints that had changed")
	}
	if got, want := endpointsOf(ingest("k3", ev())), sortedIDs(first, second.ID); !slices.Equal(got, want) {
		t.Fatalf("deliveries to %v, want %v", got, want)
	}
	if storage.FastGroups(g) != fast+1 {
		t.Fatal("the endpoints read again were not used in one round trip")
	}

	only := []string{"b"}
	if _, err := s.UpdateEndpoint(ctx, p, first, storage.EndpointPatch{EventTypes: &only}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := endpointsOf(ingest("k4", ev())); !slices.Equal(got, []string{second.ID}) {
		t.Fatalf("after a change of event types: deliveries to %v", got)
	}
	if err := s.DeleteEndpoint(ctx, p, second.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := endpointsOf(ingest("k5", ev())); len(got) != 0 {
		t.Fatalf("after a deletion: deliveries to %v", got)
	}

	events := count(t, db, `SELECT count(*) FROM events`)
	if o := ingest("k5", ev()); !errors.Is(o.err, storage.ErrIngestAlone) {
		t.Fatalf("a replayed key: %+v", o)
	}
	if count(t, db, `SELECT count(*) FROM events`) != events {
		t.Fatal("a replayed key wrote an event")
	}
	unknown := ev()
	unknown.EndpointIDs = []string{"ep_NOPE"}
	if o := ingest("k6", unknown); o.err != nil || o.resp.StatusCode != 400 || o.evs != nil {
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
