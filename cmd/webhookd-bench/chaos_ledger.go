package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// waitDrained polls PostgreSQL until no delivery waits for an attempt, or
// deadline passes (drained false).
func (s *chaosSystem) waitDrained(ctx context.Context, deadline time.Time) (bool, error) {
	for {
		n, err := s.waiting(ctx)
		if err == nil && n == 0 {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// waiting counts what is still to do: deliveries pending or retrying,
// bulk jobs queued or running, and rows left in the service's outbox.
func (s *chaosSystem) waiting(ctx context.Context) (int, error) {
	conn, err := pgx.Connect(ctx, s.db.URL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n, rows int
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM deliveries WHERE status IN ('pending', 'retrying')) +
		(SELECT count(*) FROM jobs WHERE kind = 'event_bulk' AND status IN ('queued', 'running'))`).Scan(&n)
	if err != nil {
		return 0, err
	}
	src, err := pgx.Connect(ctx, s.outboxDB.URL)
	if err != nil {
		return 0, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	err = src.QueryRow(ctx, "SELECT count(*) FROM webhookd_outbox").Scan(&rows)
	return n + rows, err
}

// dbDelivery is a delivery as PostgreSQL has it at the end.
type dbDelivery struct {
	endpoint string // the receiver's name for it
	status   string
	reason   string    // the dead letter's, if any
	deadAt   time.Time // when it became one
}

// dbState is what the ledger reads from PostgreSQL: every event with its
// deliveries, and when the 410 endpoint was disabled; the outbox rows' and
// bulk lines' events by their markers, the bulk jobs, and the service's
// database.
type dbState struct {
	events     map[string][]dbDelivery // event id -> deliveries
	eventTypes map[string]string
	created    map[string]time.Time
	goneAt     time.Time           // zero: not disabled
	markers    map[string][]string // an outbox row's or bulk line's marker -> its events
	jobs       map[string]dbJob    // bulk jobs by id
	source     *sourceState
}

func (s *chaosSystem) readState(ctx context.Context) (*dbState, error) {
	conn, err := pgx.Connect(ctx, s.db.URL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st := &dbState{events: make(map[string][]dbDelivery), eventTypes: make(map[string]string),
		created: make(map[string]time.Time), markers: make(map[string][]string)}
	// webhookd's own operational events (webhookd.*: a circuit opened, a
	// dead letter) are not the senders'.
	rows, err := conn.Query(ctx, `SELECT id, type, created_at, coalesce(data->>'outbox', data->>'bulk', '')
		FROM events WHERE type NOT LIKE 'webhookd.%'`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, typ, marker string
		var at time.Time
		if err := rows.Scan(&id, &typ, &at, &marker); err != nil {
			return nil, err
		}
		st.events[id], st.eventTypes[id], st.created[id] = nil, typ, at
		if marker != "" {
			st.markers[marker] = append(st.markers[marker], id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, `SELECT d.event_id, d.endpoint_id, d.status, coalesce(dl.reason, ''), coalesce(dl.dead_lettered_at, 'epoch')
		FROM deliveries d LEFT JOIN dead_letters dl ON dl.delivery_id = d.id WHERE d.event_type NOT LIKE 'webhookd.%'`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var ev, ep string
		var d dbDelivery
		if err := rows.Scan(&ev, &ep, &d.status, &d.reason, &d.deadAt); err != nil {
			return nil, err
		}
		d.endpoint = s.endpointNames[ep]
		st.events[ev] = append(st.events[ev], d)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for id, name := range s.endpointNames {
		if name != "gone" {
			continue
		}
		var disabled *string
		var updated time.Time
		if err := conn.QueryRow(ctx, "SELECT disabled_reason, updated_at FROM endpoints WHERE id = $1", id).
			Scan(&disabled, &updated); err != nil {
			return nil, err
		}
		if disabled != nil {
			st.goneAt = updated
		}
	}
	if st.jobs, err = s.readJobs(ctx); err != nil {
		return nil, err
	}
	if st.source, err = s.readSource(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

// circuitWord is how recent an endpoint's refusal must be to explain a
// delivery its open circuit held past its window and gave up unsent: the
// soak's probe wait (WEBHOOKD_CIRCUIT_PROBES=1s), a second for the probe's
// answer to be counted, and two for a loaded machine.
const circuitWord = 4 * time.Second

// ledger is the soak's verdict on every event: counts, and what failed.
type chaosLedger struct {
	Sends, SendsRepeated, KeysMismatched, SendsUnresolved int
	EventsSent, EventsInDB, EventsUnknown, EventsMissing  int
	Deliveries, Delivered, NotRoutedGone                  int
	DeadLetters                                           map[string]int // by endpoint/reason
	DeadUnexplained, Lost, NotFinished, Misrouted         int
	DeadHeldByCircuit                                     int // exhausted unsent, the endpoint refusing just before
	SucceededUnseen                                       int
	Duplicates, DuplicatesExplained                       int
	DuplicatesBy                                          map[string]int // by endpoint
	Examples                                              []string       // a few failures, for the reproduction
	Outbox                                                outboxLedger
	Bulk                                                  bulkLedger
	BulkResolved                                          int // bulks that got their 202 only on the repeat after the faults
}

// deliveryCount is the deliveries of the events of one origin (the API,
// the outbox, bulk jobs): due, delivered, dead letters, lost.
type deliveryCount struct{ due, delivered, dead, notRouted, lost int }

// checkLedger compares the sends, the receiver and PostgreSQL.
func checkLedger(load *chaosLoad, recv *chaosReceiver, st *dbState, windows []faultRecord, grace time.Duration) chaosLedger {
	l := chaosLedger{DeadLetters: make(map[string]int), DuplicatesBy: make(map[string]int)}
	example := func(format string, args ...any) {
		if len(l.Examples) < 10 {
			l.Examples = append(l.Examples, fmt.Sprintf(format, args...))
		}
	}
	sent := make(map[string]string) // event id -> type
	for _, op := range load.Ops() {
		op.mu.Lock()
		l.Sends++
		if op.repeats > 0 {
			l.SendsRepeated++
		}
		if len(op.mismatch) > 0 {
			l.KeysMismatched++
			example("key %s answered %v first, then %v", op.key, op.ids, op.mismatch)
		}
		if op.ids == nil {
			l.SendsUnresolved++
			example("key %s never got through: %v", op.key, op.err)
		}
		for i, id := range op.ids {
			sent[id] = op.events[i].Type
		}
		op.mu.Unlock()
	}
	l.EventsSent, l.EventsInDB = len(sent), len(st.events)
	// The outbox rows' and the bulk lines' events, found by their markers:
	// their own ledgers judge how many each row or line made; every one of
	// them is due its deliveries like a posted event.
	origin := make(map[string]string) // event id -> "outbox" or "bulk"; absent: the API
	for m, evs := range st.markers {
		for _, id := range evs {
			sent[id], origin[id] = st.eventTypes[id], map[bool]string{true: "outbox", false: "bulk"}[strings.HasPrefix(m, "ob-")]
		}
	}
	l.Outbox = checkOutbox(load.outbox.Txs(), st.source, st.markers, example)
	l.Bulk = checkBulk(load.bulk.Ops(), st.jobs, st.markers, example)
	l.BulkResolved = load.bulkResolved
	by := map[string]*deliveryCount{"": {}, "outbox": {}, "bulk": {}}
	for id := range st.events {
		if _, ok := sent[id]; !ok {
			l.EventsUnknown++
			example("event %s is in PostgreSQL but no send got its id: a second event for one key", id)
		}
	}
	ids := make([]string, 0, len(sent))
	for id := range sent {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		dels, ok := st.events[id]
		if !ok {
			l.EventsMissing++
			example("event %s was accepted (2xx) but is not in PostgreSQL", id)
			continue
		}
		want := routes(sent[id])
		count := by[origin[id]]
		for _, d := range dels {
			if !slices.Contains(want, d.endpoint) {
				l.Misrouted++
				example("event %s (%s) has a delivery to %s", id, sent[id], d.endpoint)
			}
		}
		for _, name := range want {
			l.Deliveries++
			count.due++
			i := slices.IndexFunc(dels, func(d dbDelivery) bool { return d.endpoint == name })
			rec, _ := recv.Receipt(name, id)
			if i < 0 {
				if name == "gone" && !st.goneAt.IsZero() && !st.created[id].Before(st.goneAt.Add(-time.Second)) {
					l.NotRoutedGone++ // created once the endpoint had said 410 and was disabled
					count.notRouted++
					continue
				}
				l.Lost++
				count.lost++
				example("event %s: no delivery to %s", id, name)
				continue
			}
			d := dels[i]
			switch d.status {
			case "succeeded":
				if rec.ok == 0 {
					l.SucceededUnseen++
					count.lost++
					example("event %s: succeeded at %s, which never answered it 2xx", id, name)
					continue
				}
				l.Delivered++
				count.delivered++
			case "dead_letter":
				l.DeadLetters[name+"/"+d.reason]++
				count.dead++
				explained := rec.refused > 0 || name == "hanging" && rec.receipts > 0 ||
					d.reason == "endpoint_disabled" && name == "gone"
				if !explained && d.reason == "exhausted" &&
					recv.RefusedBetween(name, d.deadAt.Add(-circuitWord), d.deadAt) {
					// Held by the endpoint's open circuit past its window
					// (SPEC §3): given up only while its last probe had
					// failed, which an answer just before tells.
					explained = true
					l.DeadHeldByCircuit++
				}
				if !explained {
					l.DeadUnexplained++
					example("event %s: dead letter (%s) at %s, which never refused it (%d receipts)", id, d.reason, name, rec.receipts)
				}
			default:
				l.NotFinished++
				example("event %s: delivery to %s still %s after the drain", id, name, d.status)
			}
			for range rec.afterOK {
				l.Duplicates++
				l.DuplicatesBy[name]++
				if duringFault(rec.firstOK, windows, grace) {
					l.DuplicatesExplained++
				} else {
					example("event %s: delivered again to %s though answered 2xx at %s, outside every fault",
						id, name, rec.firstOK.UTC().Format("15:04:05.000"))
				}
			}
		}
	}
	o, b := by["outbox"], by["bulk"]
	l.Outbox.Deliveries, l.Outbox.Delivered, l.Outbox.DeadLetters = o.due, o.delivered, o.dead
	l.Outbox.NotRouted, l.Outbox.DeliveriesLost = o.notRouted, o.lost
	l.Bulk.Deliveries, l.Bulk.Delivered, l.Bulk.DeadLetters = b.due, b.delivered, b.dead
	l.Bulk.NotRouted, l.Bulk.DeliveriesLost = b.notRouted, b.lost
	return l
}

// duringFault reports whether t lies in a fault, from 3 s before it (an attempt answered just before a kill)
// to grace after it was undone.
func duringFault(t time.Time, windows []faultRecord, grace time.Duration) bool {
	for _, w := range windows {
		if !t.Before(w.Start.Add(-3*time.Second)) && !t.After(w.End.Add(grace)) {
			return true
		}
	}
	return false
}
