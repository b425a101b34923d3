package storage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestCircuitOpensProbesClosesAndDisables: the breaker's state as outcomes
// are applied: open at After failures with the first probe's wait, a
// failed probe moves the next probe along the waits, a success closes it,
// and a failing spell past DisableAfter disables the endpoint (failing),
// with its webhookd.endpoint.disabled event.
func TestCircuitOpensProbesClosesAndDisables(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	_, p, err := db.Store().CreateAPIKey(ctx, "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := db.Store().CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: "http://127.0.0.1:9/", Secret: "whsec_AAAA"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ep := e.ID
	cfg := storage.CircuitConfig{After: 3, Probes: []time.Duration{10 * time.Second, time.Minute}, DisableAfter: time.Hour}
	t0 := time.Now().UTC().Truncate(time.Second)
	apply := func(ok bool, at time.Time, probe ...bool) []storage.CircuitChange {
		t.Helper()
		ch, err := db.ApplyCircuit(ctx, cfg, []storage.CircuitOutcome{{EndpointID: ep, OK: ok, At: at, Probe: len(probe) > 0}})
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	state := func() (string, *time.Time, string) {
		var circuit, status string
		var probe *time.Time
		db.Pool().QueryRow(ctx, `SELECT circuit, probe_at, status FROM endpoints WHERE id = $1`, ep).Scan(&circuit, &probe, &status)
		return circuit, probe, status
	}
	for i := range 2 {
		if ch := apply(false, t0.Add(time.Duration(i)*time.Second)); len(ch) != 0 {
			t.Fatalf("failure %d changed %+v", i+1, ch)
		}
	}
	ch := apply(false, t0.Add(2*time.Second))
	if c, p, _ := state(); len(ch) != 1 || ch[0].To != webhookd.CircuitOpen || c != webhookd.CircuitOpen ||
		p == nil || !p.Equal(t0.Add(12*time.Second)) {
		t.Fatalf("third failure: %+v, circuit %s probe %v", ch, c, p)
	}
	if took, err := db.TakeProbe(ctx, ep, t0.Add(5*time.Second), t0.Add(time.Minute), ""); took || err != nil {
		t.Fatalf("probe taken before it was due: %v %v", took, err)
	}
	if took, _ := db.TakeProbe(ctx, ep, t0.Add(12*time.Second), t0.Add(time.Minute), ""); !took {
		t.Fatal("the due probe was not taken")
	}
	if took, _ := db.TakeProbe(ctx, ep, t0.Add(12*time.Second), t0.Add(time.Minute), ""); took {
		t.Fatal("a second probe was taken")
	}
	apply(false, t0.Add(13*time.Second), true)
	if c, p, _ := state(); c != webhookd.CircuitOpen || !p.Equal(t0.Add(73*time.Second)) {
		t.Fatalf("after a failed probe: %s, next probe %v", c, p)
	}
	ch = apply(true, t0.Add(80*time.Second))
	if c, p, _ := state(); len(ch) != 1 || ch[0].To != webhookd.CircuitClosed || c != webhookd.CircuitClosed || p != nil {
		t.Fatalf("after a success: %+v, %s %v", ch, c, p)
	}
	if ch := apply(true, t0.Add(81*time.Second)); len(ch) != 0 {
		t.Fatalf("a success on a healthy endpoint changed %+v", ch)
	}
	apply(false, t0.Add(2*time.Hour))
	ch = apply(false, t0.Add(3*time.Hour+time.Second))
	if _, _, s := state(); len(ch) != 1 || !ch[0].Disabled || s != webhookd.EndpointDisabled {
		t.Fatalf("an hour of failures: %+v, status %s", ch, s)
	}
	if ev, _ := operationalEvent(t, db, p.ID, webhookd.EventEndpointDisabled); string(ev.Data) !=
		`{"disabled_reason":"failing","endpoint_id":"`+ep+`"}` {
		t.Fatalf("disabled event data %s", ev.Data)
	}
}

// breaker is an endpoint's row as the breaker left it.
type breaker struct {
	circuit, status                 string
	failures, probes, version       int
	failingSince, probeAt, openedAt *time.Time
	probeWorker                     *string
}

func readBreaker(t *testing.T, db *storage.DB, ep string) breaker {
	t.Helper()
	var b breaker
	if err := db.Pool().QueryRow(context.Background(), `SELECT circuit, status, failures, probes, version, failing_since,
		probe_at, circuit_opened_at, probe_worker FROM endpoints WHERE id = $1`, ep).Scan(&b.circuit, &b.status, &b.failures,
		&b.probes, &b.version, &b.failingSince, &b.probeAt, &b.openedAt, &b.probeWorker); err != nil {
		t.Fatal(err)
	}
	return b
}

// openCircuit makes an endpoint of a new project and opens its circuit
// with cfg.After failures 600 ms apart from t0; it returns the endpoint.
func openCircuit(t *testing.T, db *storage.DB, cfg storage.CircuitConfig, t0 time.Time) webhookd.Endpoint {
	t.Helper()
	ctx := context.Background()
	e, err := db.Store().CreateEndpoint(ctx, newProject(t, db), storage.NewEndpoint{URL: "http://127.0.0.1:9/", Secret: "whsec_AAAA"},
		time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var outs []storage.CircuitOutcome
	for i := range cfg.After {
		outs = append(outs, storage.CircuitOutcome{EndpointID: e.ID, At: t0.Add(time.Duration(i) * 600 * time.Millisecond)})
	}
	ch, err := db.ApplyCircuit(ctx, cfg, outs)
	if err != nil || len(ch) != 1 || ch[0].To != webhookd.CircuitOpen {
		t.Fatalf("the circuit did not open: %+v %v", ch, err)
	}
	return e
}

// defaultProbes are SPEC §3's probe waits.
var defaultProbes = []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute}

// TestCircuitInFlightFailuresKeepFirstProbe: the requests in flight when
// the circuit opened fail after it did; they are not probes, so the first
// probe stays 30 s after the opening (not pushed down the schedule).
func TestCircuitInFlightFailuresKeepFirstProbe(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	cfg := storage.CircuitConfig{After: 3, Probes: defaultProbes}
	t0 := time.Now().UTC().Truncate(time.Second)
	ep := openCircuit(t, db, cfg, t0).ID
	for i := range 5 {
		ch, err := db.ApplyCircuit(ctx, cfg, []storage.CircuitOutcome{{EndpointID: ep,
			At: t0.Add(1210*time.Millisecond + time.Duration(i)*time.Millisecond)}})
		if err != nil || len(ch) != 0 {
			t.Fatalf("in-flight failure %d: %+v %v", i+1, ch, err)
		}
	}
	b := readBreaker(t, db, ep)
	if want := t0.Add(1200*time.Millisecond + 30*time.Second); b.circuit != webhookd.CircuitOpen || b.probeAt == nil ||
		!b.probeAt.Equal(want) || b.probes != 0 || b.failures != 8 {
		t.Fatalf("after 5 in-flight failures: %+v (probe at %v), want open, first probe at %v, 8 failures", b, b.probeAt, want)
	}
}

// TestCircuitFailedProbeMovesToNextWait: while the probe is in flight
// another attempt's failure leaves it alone; the probe's own failure
// reopens the circuit with the next wait and frees the probe's worker.
func TestCircuitFailedProbeMovesToNextWait(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	cfg := storage.CircuitConfig{After: 3, Probes: defaultProbes}
	t0 := time.Now().UTC().Truncate(time.Second)
	ep := openCircuit(t, db, cfg, t0).ID
	due, until := t0.Add(1200*time.Millisecond+30*time.Second), t0.Add(2*time.Minute)
	if took, err := db.TakeProbe(ctx, ep, due, until, "wrk_a"); !took || err != nil {
		t.Fatalf("the due probe was not taken: %v %v", took, err)
	}
	apply := func(o storage.CircuitOutcome) {
		t.Helper()
		o.EndpointID = ep
		if _, err := db.ApplyCircuit(ctx, cfg, []storage.CircuitOutcome{o}); err != nil {
			t.Fatal(err)
		}
	}
	apply(storage.CircuitOutcome{At: due.Add(time.Second)})
	if b := readBreaker(t, db, ep); b.circuit != webhookd.CircuitProbing || !b.probeAt.Equal(until) || b.probes != 0 ||
		b.probeWorker == nil || *b.probeWorker != "wrk_a" {
		t.Fatalf("another attempt's failure during the probe: %+v, want probing until %v by wrk_a", b, until)
	}
	failed := due.Add(2 * time.Second)
	apply(storage.CircuitOutcome{At: failed, Probe: true})
	b := readBreaker(t, db, ep)
	if b.circuit != webhookd.CircuitOpen || !b.probeAt.Equal(failed.Add(time.Minute)) || b.probes != 1 || b.probeWorker != nil {
		t.Fatalf("after the failed probe: %+v (probe at %v), want open, next probe at %v, no probe worker",
			b, b.probeAt, failed.Add(time.Minute))
	}
	apply(storage.CircuitOutcome{At: failed.Add(time.Second)})
	if b := readBreaker(t, db, ep); !b.probeAt.Equal(failed.Add(time.Minute)) || b.probes != 1 {
		t.Fatalf("a late in-flight failure moved the probe: %+v", b)
	}
}

// TestCircuitChangesKeepVersion: opening and closing the circuit leaves
// the endpoint's version (a client's If-Match PATCH still applies); the
// auto-disable, a change of status, bumps it.
func TestCircuitChangesKeepVersion(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	cfg := storage.CircuitConfig{After: 3, Probes: defaultProbes, DisableAfter: time.Hour}
	t0 := time.Now().UTC().Truncate(time.Second)
	e := openCircuit(t, db, cfg, t0)
	if b := readBreaker(t, db, e.ID); b.version != e.Version {
		t.Fatalf("opening the circuit: version %d -> %d", e.Version, b.version)
	}
	if _, err := db.ApplyCircuit(ctx, cfg, []storage.CircuitOutcome{{EndpointID: e.ID, OK: true, At: t0.Add(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	if b := readBreaker(t, db, e.ID); b.circuit != webhookd.CircuitClosed || b.version != e.Version {
		t.Fatalf("closing the circuit: %s, version %d -> %d", b.circuit, e.Version, b.version)
	}
	desc := "x"
	if _, err := db.Store().UpdateEndpoint(ctx, e.ProjectID, e.ID, storage.EndpointPatch{Description: &desc, IfVersion: &e.Version},
		time.Now()); err != nil {
		t.Fatalf("If-Match PATCH after the circuit flapped: %v", err)
	}
	outs := []storage.CircuitOutcome{{EndpointID: e.ID, At: t0.Add(2 * time.Minute)}, {EndpointID: e.ID, At: t0.Add(2*time.Hour + time.Minute)}}
	if ch, err := db.ApplyCircuit(ctx, cfg, outs); err != nil || len(ch) != 1 || !ch[0].Disabled {
		t.Fatalf("two hours of failures: %+v %v", ch, err)
	}
	if b := readBreaker(t, db, e.ID); b.version != e.Version+2 {
		t.Fatalf("disabling: version %d, want %d (PATCH, then disabled)", b.version, e.Version+2)
	}
}

// TestCircuitEnabledEndpointStartsClosed: an endpoint disabled as failing
// (circuit open) and enabled by a person has a closed circuit and no
// failing spell; its next failure is one failure, not a disabling.
func TestCircuitEnabledEndpointStartsClosed(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	cfg := storage.CircuitConfig{After: 3, Probes: defaultProbes, DisableAfter: time.Hour}
	t0 := time.Now().UTC().Add(-2 * time.Hour)
	e := openCircuit(t, db, cfg, t0)
	if _, err := db.TakeProbe(ctx, e.ID, t0.Add(time.Minute), t0.Add(2*time.Minute), "wrk_a"); err != nil {
		t.Fatal(err)
	}
	ch, err := db.ApplyCircuit(ctx, cfg, []storage.CircuitOutcome{{EndpointID: e.ID, At: t0.Add(90 * time.Minute)}})
	if err != nil || len(ch) != 1 || !ch[0].Disabled {
		t.Fatalf("not disabled: %+v %v", ch, err)
	}
	active := webhookd.EndpointActive
	if _, err := db.Store().UpdateEndpoint(ctx, e.ProjectID, e.ID, storage.EndpointPatch{Status: &active}, time.Now()); err != nil {
		t.Fatal(err)
	}
	b := readBreaker(t, db, e.ID)
	if b.status != webhookd.EndpointActive || b.circuit != webhookd.CircuitClosed || b.failures != 0 || b.failingSince != nil ||
		b.probes != 0 || b.probeAt != nil || b.probeWorker != nil || b.openedAt != nil {
		t.Fatalf("enabled: %+v, want active, closed, no failures, no failing spell, no probe", b)
	}
	ch, err = db.ApplyCircuit(ctx, cfg, []storage.CircuitOutcome{{EndpointID: e.ID, At: time.Now()}})
	if b := readBreaker(t, db, e.ID); err != nil || len(ch) != 0 || b.status != webhookd.EndpointActive || b.failures != 1 {
		t.Fatalf("one failure after the enable: %+v %v, endpoint %+v", ch, err, b)
	}
}

// TestCircuitEventsInTheOrderOfTheChanges: a success counted after the
// failures that opened the circuit, though it came before them (an attempt
// in flight, counted late by its worker), closes the circuit, and its
// circuit_closed follows the circuit_opened in the endpoint's history, by
// id as the API lists it and by time (chaos soak, seed 185340947:
// "circuit_closed twice in a row").
func TestCircuitEventsInTheOrderOfTheChanges(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	e, err := db.Store().CreateEndpoint(ctx, newProject(t, db), storage.NewEndpoint{URL: "http://127.0.0.1:9/", Secret: "whsec_AAAA"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg := storage.CircuitConfig{After: 3, Probes: []time.Duration{10 * time.Second}}
	t0 := time.Now().UTC().Truncate(time.Second)
	apply := func(ok bool, at time.Time) {
		t.Helper()
		if _, err := db.ApplyCircuit(ctx, cfg, []storage.CircuitOutcome{{EndpointID: e.ID, OK: ok, At: at}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		apply(false, t0.Add(time.Duration(i)*time.Second))
	}
	apply(true, t0.Add(1500*time.Millisecond)) // before the third failure, counted after it
	apply(false, t0.Add(3*time.Second))
	for i := range 3 { // and it opens again
		apply(false, t0.Add(time.Duration(4+i)*time.Second))
	}
	rows, err := db.Pool().Query(ctx, `SELECT type, created_at FROM events
		WHERE type LIKE 'webhookd.endpoint.circuit_%' AND data->>'endpoint_id' = $1 ORDER BY id`, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	var (
		typ  string
		at   time.Time
		seen []string
		prev time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&typ, &at}, func() error {
		if !at.After(prev) {
			t.Errorf("%s at %s, not after the event before it (%s)", typ, at, prev)
		}
		seen, prev = append(seen, strings.TrimPrefix(typ, "webhookd.endpoint.circuit_")), at
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, ","); got != "opened,closed,opened" {
		t.Fatalf("the endpoint's circuit events in id order: %s, want opened,closed,opened", got)
	}
}
