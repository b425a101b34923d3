package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// opsEvent is one of webhookd's operational events as PostgreSQL has it.
type opsEvent struct {
	id, typ, about string
	deliveryID     string     // dead_lettered: the delivery it tells of
	nextProbe      *time.Time // circuit_opened: when its first probe is due
	created        time.Time
}

// seamState is what the seams' checks read from PostgreSQL at the end:
// the ordered endpoint's queue numbers, the operational events, the
// endpoints' circuits, and the senders' dead letters.
type seamState struct {
	fifoSeq     map[string]int64  // event id -> its delivery's number at the ordered endpoint
	ops         []opsEvent        // by id: in commit order per endpoint (ULIDs, made under the endpoint's lock)
	circuit     map[string]string // endpoint name -> its circuit at the end
	lastFinish  map[string]time.Time
	deadLetters map[string]string // delivery id -> endpoint name, of the senders' events
	ids, names  map[string]string // endpoint name -> id, and back
}

func (s *chaosSystem) readSeams(ctx context.Context) (*seamState, error) {
	conn, err := pgx.Connect(ctx, s.db.URL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st := &seamState{fifoSeq: make(map[string]int64), circuit: make(map[string]string),
		lastFinish: make(map[string]time.Time), deadLetters: make(map[string]string),
		ids: s.endpointIDs, names: s.endpointNames}
	rows, err := conn.Query(ctx, `SELECT event_id, fifo_seq FROM deliveries WHERE endpoint_id = $1 AND fifo_seq IS NOT NULL`,
		s.endpointIDs["ordered"])
	if err != nil {
		return nil, err
	}
	var ev string
	var seq int64
	if _, err := pgx.ForEachRow(rows, []any{&ev, &seq}, func() error { st.fifoSeq[ev] = seq; return nil }); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, `SELECT id, type, coalesce(data->>'endpoint_id', ''), coalesce(data->>'delivery_id', ''),
			(data->>'next_probe_at')::timestamptz, created_at
		FROM events WHERE type LIKE 'webhookd.%' ORDER BY id`)
	if err != nil {
		return nil, err
	}
	var o opsEvent
	if _, err := pgx.ForEachRow(rows, []any{&o.id, &o.typ, &o.about, &o.deliveryID, &o.nextProbe, &o.created},
		func() error { st.ops = append(st.ops, o); return nil }); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, `SELECT e.id, e.circuit, coalesce(max(d.updated_at) FILTER (WHERE d.status IN ('succeeded', 'dead_letter')), 'epoch')
		FROM endpoints e LEFT JOIN deliveries d ON d.endpoint_id = e.id GROUP BY e.id`)
	if err != nil {
		return nil, err
	}
	var id, circuit string
	var last time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &circuit, &last}, func() error {
		st.circuit[s.endpointNames[id]], st.lastFinish[s.endpointNames[id]] = circuit, last
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, `SELECT delivery_id, endpoint_id FROM dead_letters WHERE event_type NOT LIKE 'webhookd.%'`)
	if err != nil {
		return nil, err
	}
	if _, err := pgx.ForEachRow(rows, []any{&id, &ev}, func() error {
		st.deadLetters[id] = s.endpointNames[ev]
		return nil
	}); err != nil {
		return nil, err
	}
	return st, nil
}

// seamLedger is the verdict on the engine's seams: the ordered endpoint,
// the breaker's probes, the operational events, and liveness.
type seamLedger struct {
	// The ordered endpoint.
	OrderedRequests   int // requests it got
	OrderedEvents     int // events numbered for it
	MostInFlight      int // requests it held at once (1 at most)
	OutOfOrder        int // requests for an event numbered before one it had already been sent
	NumberedAgainst   int // pairs numbered against the order the API accepted them in
	OrderedRetries    int // requests repeating the event just sent (a retry, or a duplicate after a fault)
	OrderedDeadLetter int // its dead letters (each let the next go)

	// The breaker (the flapping endpoint).
	Openings, Closings int
	ProbesOnTime       int           // openings whose first probe went within the bound, fault-free time counted
	ProbesLate         int           // ... that did not
	ProbesUnneeded     int           // openings after which nothing was left to probe
	WorstProbe         time.Duration // the latest first probe past its probe_at, fault-free time counted
	FlappingStranded   int           // events accepted for it still not delivered nor dead-lettered

	// Operational events.
	OpsByType          map[string]int // events in PostgreSQL
	OpsMissing         int            // ... that the ops endpoint never got 2xx for
	OpsUnknown         int            // event ids the ops endpoint got that are no operational event
	OpsDuplicates      int            // requests after a 2xx, outside every fault
	HistoryBroken      int            // endpoints whose circuit_opened/closed do not alternate, or end otherwise than the circuit
	DeadLettersUntold  int            // senders' dead letters with no dead_lettered event
	DeadLettersTwice   int            // dead letters told more than once
	OpsCircuitReceived int            // circuit_opened events the ops endpoint got

	Liveness livenessVerdict
	Examples []string
}

// checkSeams judges the seams from the receiver, the sends and PostgreSQL.
func checkSeams(load *chaosLoad, recv *chaosReceiver, st *seamState, dels *dbState, faults []faultRecord,
	grace, bound time.Duration) seamLedger {
	l := seamLedger{OpsByType: make(map[string]int)}
	example := func(format string, args ...any) {
		if len(l.Examples) < 10 {
			l.Examples = append(l.Examples, fmt.Sprintf(format, args...))
		}
	}
	l.checkOrdered(load, recv, st, dels, example)
	l.checkProbes(recv, st, dels, faults, bound, example)
	l.checkOps(recv, st, faults, grace, example)
	return l
}

// checkOrdered: one request in flight at most; never an event numbered
// before one already sent (a repeat of the last is a retry); numbers in
// the order the API accepted the events.
func (l *seamLedger) checkOrdered(load *chaosLoad, recv *chaosReceiver, st *seamState, dels *dbState,
	example func(string, ...any)) {
	arrivals, most := recv.Arrivals("ordered")
	l.OrderedRequests, l.MostInFlight, l.OrderedEvents = len(arrivals), most, len(st.fifoSeq)
	if most > 1 {
		example("the ordered endpoint held %d requests at once", most)
	}
	var last int64 = -1
	lastID := ""
	for _, a := range arrivals {
		seq, ok := st.fifoSeq[a.id]
		if !ok {
			continue // not a sender's event (none are routed there)
		}
		switch {
		case a.id == lastID:
			l.OrderedRetries++
		case seq < last:
			l.OutOfOrder++
			example("ordered: %s (number %d) sent at %s after %s (number %d)", a.id, seq,
				a.at.UTC().Format("15:04:05.000"), lastID, last)
		}
		if seq > last {
			last, lastID = seq, a.id
		}
	}
	for _, ds := range dels.events {
		for _, d := range ds {
			if d.endpoint == "ordered" && d.status == "dead_letter" {
				l.OrderedDeadLetter++
			}
		}
	}
	// Accepted before another was sent: numbered before it.
	type acc struct {
		sent, ok time.Time
		seq      int64
		id       string
	}
	var accs []acc
	for _, op := range load.Ops() {
		op.mu.Lock()
		for _, id := range op.ids {
			if seq, ok := st.fifoSeq[id]; ok {
				accs = append(accs, acc{op.sentAt, op.okAt, seq, id})
			}
		}
		op.mu.Unlock()
	}
	sort.Slice(accs, func(i, j int) bool { return accs[i].ok.Before(accs[j].ok) })
	for _, b := range accs {
		for _, a := range accs {
			if !a.ok.Before(b.sent) {
				break
			}
			if a.seq > b.seq {
				l.NumberedAgainst++
				example("ordered: %s accepted at %s, before %s was sent, but numbered after it", a.id,
					a.ok.UTC().Format("15:04:05.000"), b.id)
			}
		}
	}
}

// checkProbes: after each opening of the flapping endpoint's circuit, a
// request came within the bound of the probe_at it gave (time under a
// fault on a worker, PostgreSQL or Redis not counted), unless nothing was
// left to probe; and every event for it ended delivered or dead-lettered.
func (l *seamLedger) checkProbes(recv *chaosReceiver, st *seamState, dels *dbState, faults []faultRecord,
	bound time.Duration, example func(string, ...any)) {
	arrivals, _ := recv.Arrivals("flapping")
	windows := workerFaults(faults)
	flapping := st.ids["flapping"]
	for _, o := range st.ops {
		if o.about != flapping {
			continue
		}
		switch o.typ {
		case "webhookd.endpoint.circuit_closed":
			l.Closings++
			continue
		case "webhookd.endpoint.circuit_opened":
		default:
			continue
		}
		l.Openings++
		if o.nextProbe == nil {
			l.ProbesLate++
			example("circuit_opened %s has no next_probe_at", o.id)
			continue
		}
		p := *o.nextProbe
		i := sort.Search(len(arrivals), func(i int) bool { return !arrivals[i].at.Before(p) })
		if i == len(arrivals) {
			if st.lastFinish["flapping"].After(p.Add(bound)) {
				l.ProbesLate++
				example("circuit of flapping opened at %s: no request after its probe_at %s, though a delivery "+
					"finished at %s", o.created.UTC().Format("15:04:05.0"), p.UTC().Format("15:04:05.0"),
					st.lastFinish["flapping"].UTC().Format("15:04:05.0"))
			} else {
				l.ProbesUnneeded++
			}
			continue
		}
		late := arrivals[i].at.Sub(p) - covered(windows, p, arrivals[i].at)
		l.WorstProbe = max(l.WorstProbe, late)
		if late > bound {
			l.ProbesLate++
			example("circuit of flapping opened at %s: first request %s after its probe_at %s outside faults",
				o.created.UTC().Format("15:04:05.0"), late.Round(100*time.Millisecond), p.UTC().Format("15:04:05.0"))
		} else {
			l.ProbesOnTime++
		}
	}
	for _, ds := range dels.events {
		for _, d := range ds {
			if d.endpoint == "flapping" && d.status != "succeeded" && d.status != "dead_letter" {
				l.FlappingStranded++
			}
		}
	}
}

// checkOps: every operational event reached the ops endpoint (none lost,
// none it got that is not one, no duplicate outside a fault); each
// endpoint's circuit_opened and circuit_closed alternate, starting with an
// opening, and the last agrees with its circuit now; every dead letter of
// a sender's event was told once.
func (l *seamLedger) checkOps(recv *chaosReceiver, st *seamState, faults []faultRecord, grace time.Duration,
	example func(string, ...any)) {
	ops := st.ids["ops"]
	known := make(map[string]bool)
	open := make(map[string]bool) // endpoint id -> opened, by its events
	told := make(map[string]int)  // delivery id -> dead_lettered events
	for _, o := range st.ops {
		known[o.id] = true
		l.OpsByType[o.typ]++
		if o.about == ops {
			continue // never sent to the endpoint it is about
		}
		rec, _ := recv.Receipt("ops", o.id)
		if rec.ok == 0 {
			l.OpsMissing++
			example("operational event %s (%s about %s) never reached the ops endpoint", o.id, o.typ, o.about)
		} else if o.typ == "webhookd.endpoint.circuit_opened" {
			l.OpsCircuitReceived++
		}
		for range rec.afterOK {
			if !duringFault(rec.firstOK, faults, grace) {
				l.OpsDuplicates++
				example("operational event %s reached the ops endpoint again outside every fault", o.id)
			}
		}
		switch o.typ {
		case "webhookd.endpoint.circuit_opened", "webhookd.endpoint.circuit_closed":
			opened := o.typ == "webhookd.endpoint.circuit_opened"
			if open[o.about] == opened {
				l.HistoryBroken++
				example("%s: %s twice in a row (%s)", st.names[o.about], o.typ, o.id)
			}
			open[o.about] = opened
		case "webhookd.delivery.dead_lettered":
			told[o.deliveryID]++
		}
	}
	for name, circuit := range st.circuit {
		if name == "" {
			continue
		}
		if open[st.ids[name]] != (circuit != "closed") {
			l.HistoryBroken++
			example("%s: its circuit is %s, its last circuit event says otherwise", name, circuit)
		}
	}
	for _, id := range recv.Seen("ops") {
		if !known[id] {
			l.OpsUnknown++
			example("the ops endpoint got %s, which is no operational event", id)
		}
	}
	for id, name := range st.deadLetters {
		switch n := told[id]; {
		case n == 0:
			l.DeadLettersUntold++
			example("dead letter of %s at %s: no webhookd.delivery.dead_lettered event", id, name)
		case n > 1:
			l.DeadLettersTwice++
			example("dead letter of %s at %s told %d times", id, name, n)
		}
	}
}
