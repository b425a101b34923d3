package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestCircuitOpensProbesClosesAndDisables: the breaker's state as outcomes
// are applied: open at After failures with the first probe's wait, a
// failed probe moves the next probe along the waits, a success closes it,
// and a failing spell past DisableAfter disables the endpoint (failing).
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
	apply := func(ok bool, at time.Time) []storage.CircuitChange {
		t.Helper()
		ch, err := db.ApplyCircuit(ctx, cfg, []storage.CircuitOutcome{{EndpointID: ep, OK: ok, At: at}})
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
	apply(false, t0.Add(13*time.Second))
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
}
