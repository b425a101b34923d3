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

// recordEnv is a project with an endpoint that takes every type (about),
// and one ops endpoint per operational type it lists.
type recordEnv struct {
	db      *storage.DB
	project string
	about   string
	ops     map[string]string // by the operational type it lists
}

func newRecordEnv(t *testing.T, opsTypes ...string) recordEnv {
	t.Helper()
	db := testenv.DB(t)
	e := recordEnv{db: db, project: newProject(t, db), ops: map[string]string{}}
	e.about = e.endpoint(t, nil)
	for _, typ := range opsTypes {
		e.ops[typ] = e.endpoint(t, []string{typ})
	}
	return e
}

func (e recordEnv) endpoint(t *testing.T, types []string) string {
	t.Helper()
	ep, err := e.db.Store().CreateEndpoint(context.Background(), e.project, storage.NewEndpoint{URL: "http://127.0.0.1:9/",
		Secret: "whsec_AAAA", EventTypes: types}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ep.ID
}

// lease makes an event of type typ and leases its delivery to about.
func (e recordEnv) lease(t *testing.T, typ string) storage.Lease {
	t.Helper()
	ctx, now := context.Background(), time.Now().UTC()
	evs, err := e.db.Store().CreateEvents(ctx, e.project, []storage.NewEvent{{Type: typ, Data: json.RawMessage("1"),
		EndpointIDs: []string{e.about}}}, now, func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ls, err := e.db.ClaimDeliveries(ctx, now, now.Add(time.Minute),
		[]storage.Claim{{DeliveryID: evs[0].Deliveries[0].ID, Token: storage.NewRequestID(), Mode: storage.ClaimAny}})
	if err != nil || !ls[0].Held {
		t.Fatalf("lease: %+v %v", ls, err)
	}
	return ls[0]
}

// record is the record of an automatic attempt of l answered with code.
func record(l *storage.Lease, code int, t storage.Transition) storage.Record {
	t.Now, t.Auto = time.Now().UTC(), true
	a := webhookd.Attempt{DeliveryID: l.Delivery.ID, Number: l.Delivery.AttemptsCount + 1, RequestID: l.Token,
		URL: "http://127.0.0.1:9/", Trigger: webhookd.TriggerAuto, StatusCode: &code, StartedAt: t.Now}
	return storage.Record{Lease: l, Attempt: &a, Transition: t}
}

// countEvents counts the project's events of type typ.
func (e recordEnv) countEvents(t *testing.T, typ string) int {
	t.Helper()
	var n int
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM events WHERE project_id = $1 AND type = $2`,
		e.project, typ).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeadLetterRecordWritesItsEvent: a record that makes its delivery a
// dead letter writes webhookd.delivery.dead_lettered, with a delivery for
// the endpoint that lists it, in its own transaction: when the event
// cannot be written, the record does not apply either (and applies when
// made again with the same lease).
func TestDeadLetterRecordWritesItsEvent(t *testing.T) {
	t.Parallel()
	typ := webhookd.EventDeliveryDeadLetter
	e := newRecordEnv(t, typ)
	ctx := context.Background()
	l := e.lease(t, "order.paid")
	r := record(&l, 422, storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonClientError})

	if _, err := e.db.Pool().Exec(ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE 'refused'; END$$;
		CREATE TRIGGER refuse BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := e.db.RecordAttempts(ctx, []storage.Record{r}); err == nil {
		t.Fatalf("recorded (applied %v) although its event could not be written", ok)
	}
	d, err := e.db.Store().GetDelivery(ctx, e.project, l.Delivery.ID)
	if err != nil || d.Status != webhookd.DeliveryPending || len(d.Attempts) != 0 {
		t.Fatalf("delivery %s with %d attempts (%v): want it pending, unattempted, without its event", d.Status, len(d.Attempts), err)
	}
	if _, err := e.db.Pool().Exec(ctx, `DROP TRIGGER refuse ON events`); err != nil {
		t.Fatal(err)
	}

	ok, ds, err := e.db.RecordAttempts(ctx, []storage.Record{r})
	if err != nil || !ok[0] {
		t.Fatalf("record again: %v %v", ok, err)
	}
	ev, got := operationalEvent(t, e.db, e.project, typ)
	want := map[string]any{"delivery_id": l.Delivery.ID, "event_id": l.Delivery.EventID, "endpoint_id": e.about,
		"event_type": "order.paid", "reason": webhookd.ReasonClientError, "last_status_code": 422.0}
	var data map[string]any
	if err := json.Unmarshal(ev.Data, &data); err != nil || !mapsEqual(data, want) {
		t.Fatalf("dead_lettered data %s (%v), want %v", ev.Data, err, want)
	}
	if !slices.Equal(got.endpoints, []string{e.ops[typ]}) {
		t.Fatalf("dead_lettered went to %v, want only %s", got.endpoints, e.ops[typ])
	}
	if len(ds) != 1 || ds[0].ID != got.ids[0] || ds[0].EndpointID != e.ops[typ] || !ds[0].DueAt.Equal(r.Transition.Now) {
		t.Fatalf("deliveries to enqueue %+v, want the event's %v due at %v", ds, got.ids, r.Transition.Now)
	}
	if d, err := e.db.Store().GetDelivery(ctx, e.project, l.Delivery.ID); err != nil || d.Status != webhookd.DeliveryDeadLetter {
		t.Fatalf("delivery %s (%v), want a dead letter", d.Status, err)
	}
}

// TestGoneRecordDisablesWithItsEvent: 410 Gone disables the endpoint and
// writes webhookd.endpoint.disabled (reason gone) once, however many of
// the call's records answered 410, beside the dead letters' events.
func TestGoneRecordDisablesWithItsEvent(t *testing.T) {
	t.Parallel()
	e := newRecordEnv(t, webhookd.EventEndpointDisabled, webhookd.EventDeliveryDeadLetter)
	ctx := context.Background()
	l1, l2 := e.lease(t, "a"), e.lease(t, "a")
	gone := storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonClientError,
		DisableEndpoint: true}
	ok, ds, err := e.db.RecordAttempts(ctx, []storage.Record{record(&l1, 410, gone), record(&l2, 410, gone)})
	if err != nil || !ok[0] || !ok[1] {
		t.Fatalf("record: %v %v", ok, err)
	}
	ep, err := e.db.Store().GetEndpoint(ctx, e.project, e.about)
	if err != nil || ep.Status != webhookd.EndpointDisabled || ep.DisabledReason == nil || *ep.DisabledReason != webhookd.DisabledGone {
		t.Fatalf("endpoint %s (%v), want disabled, gone", ep.Status, err)
	}
	if n := e.countEvents(t, webhookd.EventEndpointDisabled); n != 1 {
		t.Fatalf("%d endpoint.disabled events, want 1", n)
	}
	ev, got := operationalEvent(t, e.db, e.project, webhookd.EventEndpointDisabled)
	var data map[string]any
	if err := json.Unmarshal(ev.Data, &data); err != nil ||
		!mapsEqual(data, map[string]any{"endpoint_id": e.about, "disabled_reason": webhookd.DisabledGone}) {
		t.Fatalf("endpoint.disabled data %s (%v)", ev.Data, err)
	}
	if !slices.Equal(got.endpoints, []string{e.ops[webhookd.EventEndpointDisabled]}) {
		t.Fatalf("endpoint.disabled went to %v", got.endpoints)
	}
	if n := e.countEvents(t, webhookd.EventDeliveryDeadLetter); n != 2 || len(ds) != 3 {
		t.Fatalf("%d dead_lettered events and %d deliveries to enqueue, want 2 and 3", n, len(ds))
	}
}

// TestOrdinaryRecordWritesNoEvent: a success, a retry, and the dead
// letter of an operational event's delivery write no operational event.
func TestOrdinaryRecordWritesNoEvent(t *testing.T) {
	t.Parallel()
	e := newRecordEnv(t, webhookd.EventDeliveryDeadLetter, webhookd.EventEndpointDisabled)
	ctx := context.Background()
	next := time.Now().Add(time.Minute)
	l1, l2, l3 := e.lease(t, "a"), e.lease(t, "a"), e.lease(t, webhookd.EventCircuitOpened)
	ok, ds, err := e.db.RecordAttempts(ctx, []storage.Record{
		record(&l1, 200, storage.Transition{Status: webhookd.DeliverySucceeded}),
		record(&l2, 503, storage.Transition{Status: webhookd.DeliveryRetrying, NextAttemptAt: &next}),
		record(&l3, 422, storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonClientError}),
	})
	if err != nil || !ok[0] || !ok[1] || !ok[2] || len(ds) != 0 {
		t.Fatalf("record: applied %v, enqueue %v, %v", ok, ds, err)
	}
	var n int
	if err := e.db.Pool().QueryRow(ctx, `SELECT count(*) FROM events WHERE project_id = $1 AND type = ANY($2)`,
		e.project, []string{webhookd.EventDeliveryDeadLetter, webhookd.EventEndpointDisabled}).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d operational events (%v), want none", n, err)
	}
}

// mapsEqual compares two decoded JSON objects of scalars.
func mapsEqual(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
