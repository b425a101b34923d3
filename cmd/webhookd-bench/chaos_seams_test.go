package main

import (
	"testing"
	"time"
)

// Each of the seams' checks fails on the history it is there to catch,
// and holds on the same history told right.

var seamT0 = time.Date(2026, 12, 3, 1, 0, 0, 0, time.UTC)

func seamAt(s float64) time.Time { return seamT0.Add(time.Duration(s * float64(time.Second))) }

func seamReceiver() *chaosReceiver {
	return &chaosReceiver{seen: map[string]map[string]*chaosReceipt{"ops": {}}, arrivals: map[string][]chaosArrival{},
		mostInFlight: map[string]int{}}
}

func seamStateOf() *seamState {
	return &seamState{fifoSeq: map[string]int64{}, circuit: map[string]string{}, lastFinish: map[string]time.Time{},
		deadLetters: map[string]string{}, ids: map[string]string{"flapping": "ep_f", "ops": "ep_o"},
		names: map[string]string{"ep_f": "flapping", "ep_o": "ops"}}
}

func TestCheckOrdered(t *testing.T) {
	for _, c := range []struct {
		name      string
		order     []string
		most      int
		wantOut   int
		wantRetry int
	}{
		{"in order, a retry and a dead letter's next", []string{"e1", "e2", "e2", "e3"}, 1, 0, 1},
		{"a later one before an earlier one", []string{"e1", "e3", "e2"}, 1, 1, 0},
		{"an earlier one again after a later one", []string{"e1", "e2", "e1"}, 1, 1, 0},
	} {
		recv := seamReceiver()
		for i, id := range c.order {
			recv.arrivals["ordered"] = append(recv.arrivals["ordered"], chaosArrival{id: id, at: seamAt(float64(i))})
		}
		recv.mostInFlight["ordered"] = c.most
		st := seamStateOf()
		st.fifoSeq = map[string]int64{"e1": 1, "e2": 2, "e3": 3}
		var l seamLedger
		l.checkOrdered(&chaosLoad{}, recv, st, &dbState{}, func(string, ...any) {})
		if l.OutOfOrder != c.wantOut || l.OrderedRetries != c.wantRetry {
			t.Errorf("%s: out of order %d, retries %d; want %d, %d", c.name, l.OutOfOrder, l.OrderedRetries, c.wantOut, c.wantRetry)
		}
	}
	// Numbers against the API's order: e2 was accepted before e1 was sent.
	load := &chaosLoad{ops: []*sendOp{
		{sentAt: seamAt(2), okAt: seamAt(3), ids: []string{"e1"}},
		{sentAt: seamAt(0), okAt: seamAt(1), ids: []string{"e2"}},
	}}
	st := seamStateOf()
	st.fifoSeq = map[string]int64{"e1": 1, "e2": 2}
	var l seamLedger
	l.checkOrdered(load, seamReceiver(), st, &dbState{}, func(string, ...any) {})
	if l.NumberedAgainst != 1 {
		t.Errorf("numbered against the API's order: %d, want 1", l.NumberedAgainst)
	}
	st.fifoSeq = map[string]int64{"e1": 2, "e2": 1}
	l = seamLedger{}
	l.checkOrdered(load, seamReceiver(), st, &dbState{}, func(string, ...any) {})
	if l.NumberedAgainst != 0 {
		t.Errorf("numbered in the API's order: %d, want 0", l.NumberedAgainst)
	}
}

func TestCheckProbes(t *testing.T) {
	probe := seamAt(10)
	for _, c := range []struct {
		name     string
		arrival  float64 // s after t0; 0: none
		faults   []faultRecord
		wantLate int
	}{
		{"probe on time", 10.5, nil, 0},
		{"probe 7 s late", 17, nil, 1},
		{"probe late under a worker's fault", 17, []faultRecord{{plannedFault: plannedFault{Kind: "kill-9",
			Targets: []string{"worker-1"}}, Start: seamAt(9), End: seamAt(15)}}, 0},
		{"probe late under a serve's fault", 17, []faultRecord{{plannedFault: plannedFault{Kind: "kill-9",
			Targets: []string{"serve-1"}}, Start: seamAt(9), End: seamAt(15)}}, 1},
		{"no probe though a delivery finished later", 0, nil, 1},
	} {
		recv := seamReceiver()
		if c.arrival > 0 {
			recv.arrivals["flapping"] = []chaosArrival{{id: "e1", at: seamAt(c.arrival)}}
		}
		st := seamStateOf()
		st.ops = []opsEvent{{id: "evt_1", typ: "webhookd.endpoint.circuit_opened", about: "ep_f", nextProbe: &probe, created: seamAt(9)}}
		st.lastFinish["flapping"] = seamAt(30)
		var l seamLedger
		l.checkProbes(recv, st, &dbState{}, c.faults, 5*time.Second, func(string, ...any) {})
		if l.ProbesLate != c.wantLate {
			t.Errorf("%s: %d late, want %d", c.name, l.ProbesLate, c.wantLate)
		}
	}
}

func TestCheckOps(t *testing.T) {
	recv := seamReceiver()
	got := func(id string) { recv.seen["ops"][id] = &chaosReceipt{receipts: 1, ok: 1, firstOK: seamAt(1)} }
	st := seamStateOf()
	st.ops = []opsEvent{
		{id: "evt_1", typ: "webhookd.endpoint.circuit_opened", about: "ep_f"},
		{id: "evt_2", typ: "webhookd.endpoint.circuit_closed", about: "ep_f"},
		{id: "evt_3", typ: "webhookd.delivery.dead_lettered", about: "ep_x", deliveryID: "dlv_1"},
	}
	st.circuit["flapping"] = "closed"
	st.deadLetters["dlv_1"] = "gone"
	for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
		got(id)
	}
	var l seamLedger
	l.OpsByType = map[string]int{}
	l.checkOps(recv, st, nil, 10*time.Second, func(string, ...any) {})
	if l.OpsMissing+l.OpsUnknown+l.OpsDuplicates+l.HistoryBroken+l.DeadLettersUntold+l.DeadLettersTwice != 0 {
		t.Fatalf("a history told right fails: %+v", l)
	}
	// Now: one lost, one unknown, a second opening in a row, the circuit
	// open at the end, a duplicate, a dead letter never told.
	delete(recv.seen["ops"], "evt_2")
	got("evt_9")
	recv.seen["ops"]["evt_1"].afterOK = []time.Time{seamAt(60)}
	st.ops = append(st.ops[:2], opsEvent{id: "evt_4", typ: "webhookd.endpoint.circuit_opened", about: "ep_f"})
	got("evt_4")
	st.deadLetters["dlv_2"] = "gone"
	l = seamLedger{OpsByType: map[string]int{}}
	l.checkOps(recv, st, nil, 10*time.Second, func(string, ...any) {})
	want := seamLedger{OpsMissing: 1, OpsUnknown: 2, OpsDuplicates: 1, HistoryBroken: 1, DeadLettersUntold: 2}
	if l.OpsMissing != want.OpsMissing || l.OpsUnknown != want.OpsUnknown || l.OpsDuplicates != want.OpsDuplicates ||
		l.HistoryBroken != want.HistoryBroken || l.DeadLettersUntold != want.DeadLettersUntold {
		t.Errorf("got %+v", l)
	}
}

func TestLivenessJudge(t *testing.T) {
	s := newLivenessSampler("", 5*time.Second, time.Second)
	s.samples = 1
	s.overdue = []overdueSample{
		{id: "dlv_1", endpoint: "ep_f", reason: "circuit_open", due: seamAt(0), at: seamAt(8)},
		{id: "dlv_2", endpoint: "ep_f", reason: "schedule", due: seamAt(20), at: seamAt(30)},
		// Written at 40, accepted (the sender's retry) at 46: 4 s late.
		{id: "dlv_3", endpoint: "ep_f", event: "evt_3", due: seamAt(40), at: seamAt(50)},
	}
	faults := []faultRecord{{plannedFault: plannedFault{Kind: "postgres-restart/fast"}, Start: seamAt(21), End: seamAt(27)}}
	v := s.judge(faults, map[string]string{"ep_f": "flapping"}, map[string]time.Time{"evt_3": seamAt(46)})
	if v.Overdue != 1 || v.OverdueByReason["circuit_open"] != 1 || v.Worst != 8*time.Second {
		t.Errorf("got %+v; want dlv_1 alone overdue, by 8 s", v)
	}
}
