package storage_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestCircuitWritesOperationalEvents: the change ApplyCircuit makes and
// its operational event are written together: circuit_opened with one
// delivery per endpoint that lists the type (an ordered one numbered in
// its queue), none for the endpoint it is about or one that takes every
// type; when the event cannot be written, the circuit stays as it was;
// circuit_closed takes the next place in the ordered endpoint's queue.
func TestCircuitWritesOperationalEvents(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx, s, project := context.Background(), db.Store(), newProject(t, db)
	endpoint := func(types []string, ordering string) string {
		t.Helper()
		e, err := s.CreateEndpoint(ctx, project, storage.NewEndpoint{URL: "http://127.0.0.1:9/", Secret: "whsec_AAAA",
			EventTypes: types, Ordering: ordering}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	opened, closed := webhookd.EventCircuitOpened, webhookd.EventCircuitClosed
	about := endpoint([]string{"order.paid", opened, closed}, "")
	ops := endpoint([]string{opened}, "")
	ordered := endpoint([]string{opened, closed}, webhookd.OrderingFIFO)
	endpoint(nil, "") // every type, but not an operational one by name
	cfg := storage.CircuitConfig{After: 3, Probes: defaultProbes}
	t0 := time.Now().UTC().Truncate(time.Second)
	apply := func(ok bool, at time.Time) ([]storage.CircuitChange, error) {
		var outs []storage.CircuitOutcome
		for i := range cfg.After {
			outs = append(outs, storage.CircuitOutcome{EndpointID: about, OK: ok, At: at.Add(time.Duration(i) * time.Second)})
		}
		return db.ApplyCircuit(ctx, cfg, outs)
	}
	ch, err := apply(false, t0)
	if err != nil || len(ch) != 1 || ch[0].To != webhookd.CircuitOpen {
		t.Fatalf("not opened: %+v %v", ch, err)
	}
	ev, got := operationalEvent(t, db, project, opened)
	var data struct {
		EndpointID  string    `json:"endpoint_id"`
		Failures    int       `json:"consecutive_failures"`
		NextProbeAt time.Time `json:"next_probe_at"`
	}
	if err := json.Unmarshal(ev.Data, &data); err != nil || data.EndpointID != about || data.Failures != 3 ||
		!data.NextProbeAt.Equal(t0.Add(2*time.Second+30*time.Second)) {
		t.Fatalf("circuit_opened data %s: %+v %v", ev.Data, data, err)
	}
	if want := []string{ops, ordered}; !slices.Equal(got.endpoints, sorted(want)) {
		t.Fatalf("circuit_opened went to %v, want %v (not %s, which it is about)", got.endpoints, sorted(want), about)
	}
	var fromChange []string
	for _, d := range ch[0].Deliveries {
		fromChange = append(fromChange, d.ID)
		if !d.DueAt.Equal(t0.Add(2 * time.Second)) {
			t.Errorf("delivery %s due at %v, want the opening failure's %v", d.ID, d.DueAt, t0.Add(2*time.Second))
		}
	}
	if slices.Sort(fromChange); !slices.Equal(fromChange, got.ids) {
		t.Fatalf("the change's deliveries %v, the event's %v", fromChange, got.ids)
	}
	if got.fifo[ordered] == nil || got.fifo[ops] != nil {
		t.Fatalf("fifo numbers %v: want one for the ordered endpoint %s only", got.fifo, ordered)
	}

	if _, err := db.Pool().Exec(ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE 'refused'; END$$;
		CREATE TRIGGER refuse BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(true, t0.Add(time.Minute)); err == nil {
		t.Fatal("closed although its event could not be written")
	}
	if b := readBreaker(t, db, about); b.circuit != webhookd.CircuitOpen {
		t.Fatalf("the circuit is %s without its circuit_closed event", b.circuit)
	}
	if _, err := db.Pool().Exec(ctx, `DROP TRIGGER refuse ON events`); err != nil {
		t.Fatal(err)
	}
	if ch, err := apply(true, t0.Add(time.Minute)); err != nil || len(ch) != 1 || len(ch[0].Deliveries) != 1 {
		t.Fatalf("closing: %+v %v", ch, err)
	}
	_, closing := operationalEvent(t, db, project, closed)
	if !slices.Equal(closing.endpoints, []string{ordered}) || closing.fifo[ordered] == nil ||
		*closing.fifo[ordered] <= *got.fifo[ordered] {
		t.Fatalf("circuit_closed went to %v numbered %v, want %s after %d", closing.endpoints, closing.fifo, ordered, *got.fifo[ordered])
	}
}

// sorted returns ids in order.
func sorted(ids []string) []string { return slices.Sorted(slices.Values(ids)) }

// eventDeliveries are an event's deliveries, in id order.
type eventDeliveries struct {
	ids, endpoints []string          // endpoints in endpoint id order
	fifo           map[string]*int64 // by endpoint
}

// operationalEvent returns the project's one event of type typ and its
// pending deliveries.
func operationalEvent(t *testing.T, db *storage.DB, project, typ string) (webhookd.Event, eventDeliveries) {
	t.Helper()
	ctx := context.Background()
	var id string
	if err := db.Pool().QueryRow(ctx, `SELECT id FROM events WHERE project_id = $1 AND type = $2`, project, typ).Scan(&id); err != nil {
		t.Fatalf("one %s event: %v", typ, err)
	}
	ev, err := db.Store().GetEvent(ctx, project, id)
	if err != nil {
		t.Fatal(err)
	}
	out := eventDeliveries{fifo: map[string]*int64{}}
	rows, err := db.Pool().Query(ctx, `SELECT id, endpoint_id, fifo_seq FROM deliveries WHERE event_id = $1 AND status = 'pending'
		ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var d, ep string
		var seq *int64
		if err := rows.Scan(&d, &ep, &seq); err != nil {
			t.Fatal(err)
		}
		out.ids, out.endpoints, out.fifo[ep] = append(out.ids, d), append(out.endpoints, ep), seq
	}
	slices.Sort(out.endpoints)
	return ev, out
}
