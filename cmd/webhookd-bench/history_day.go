package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"
)

// historySchedule is webhookd's default retry schedule
// (WEBHOOKD_RETRY_SCHEDULE): the waits before attempts 2 to 5.
var historySchedule = []time.Duration{time.Minute, 15 * time.Minute, time.Hour, 24 * time.Hour}

// historyChunk is how many events one transaction of four COPYs writes.
const historyChunk = 5000

// historyDay generates and writes one day of history.
type historyDay struct {
	world        *historyWorld
	start        time.Time // the day's midnight, UTC
	deliveries   int
	seed         uint64
	payloadBytes int

	rng     *rand.Rand
	entropy *pcgReader
}

// historyEvent is one event of the day before it is written: its time and
// how many deliveries it makes.
type historyEvent struct {
	at     time.Time
	fanout int
}

// write plans the day's events (1 to 4 deliveries each, to distinct
// endpoints of the event's project, until the day has its deliveries), at
// random times of the day in order, and writes them a chunk at a time.
func (d *historyDay) write(ctx context.Context, pool *pgxpool.Pool, written *atomic.Int64) error {
	d.rng = rand.New(rand.NewPCG(d.seed, 2))
	d.entropy = &pcgReader{d.rng}
	var evs []historyEvent
	for left := d.deliveries; left > 0; {
		n := min(left, fanout(d.rng.Float64()))
		evs = append(evs, historyEvent{fanout: n})
		left -= n
	}
	times := make([]time.Duration, len(evs))
	for i := range times {
		times[i] = time.Duration(d.rng.Int64N(int64(24 * time.Hour)))
	}
	slices.Sort(times)
	for i := range evs {
		evs[i].at = d.start.Add(times[i]).Truncate(time.Microsecond) // PostgreSQL's precision
	}
	for len(evs) > 0 {
		n := min(len(evs), historyChunk)
		rows := d.rows(evs[:n])
		if err := rows.copy(ctx, pool); err != nil {
			return err
		}
		written.Add(int64(len(rows.deliveries)))
		evs = evs[n:]
	}
	return nil
}

// fanout is an event's number of deliveries for a uniform u: 1 (40%), 2
// (30%), 3 (20%) or 4 (10%).
func fanout(u float64) int {
	switch {
	case u < 0.4:
		return 1
	case u < 0.7:
		return 2
	case u < 0.9:
		return 3
	}
	return 4
}

// historyRows are one chunk's rows of each table, in the columns of
// historyColumns.
type historyRows struct {
	events, deliveries, attempts, deadLetters [][]any
}

var historyColumns = struct{ events, deliveries, attempts, deadLetters []string }{
	events: []string{"id", "project_id", "type", "data", "external_id", "created_at"},
	deliveries: []string{"id", "project_id", "event_id", "endpoint_id", "event_type", "status", "attempts_count",
		"auto_attempts", "last_status_code", "last_error", "created_at", "updated_at"},
	attempts: []string{"request_id", "delivery_id", "number", "url", "trigger", "status_code", "error", "duration_ms",
		"started_at", "request_headers", "response_headers", "response_body"},
	deadLetters: []string{"id", "project_id", "delivery_id", "event_id", "endpoint_id", "event_type", "reason",
		"last_status_code", "dead_lettered_at"},
}

// copy writes the chunk in one transaction: events, deliveries, attempts,
// then dead letters (whose foreign keys need the others). The commit need
// not wait for the WAL's flush: a crash loses generated rows, nothing else.
func (r *historyRows) copy(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return err
		}
		for _, t := range []struct {
			table   string
			columns []string
			rows    [][]any
		}{
			{"events", historyColumns.events, r.events},
			{"deliveries", historyColumns.deliveries, r.deliveries},
			{"attempts", historyColumns.attempts, r.attempts},
			{"dead_letters", historyColumns.deadLetters, r.deadLetters},
		} {
			if len(t.rows) == 0 {
				continue
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.table}, t.columns, pgx.CopyFromRows(t.rows)); err != nil {
				return fmt.Errorf("copy %s: %w", t.table, err)
			}
		}
		return nil
	})
}

// id is prefix + a ULID of time at, as storage makes them.
func (d *historyDay) id(prefix string, at time.Time) string {
	return prefix + ulid.MustNew(ulid.Timestamp(at), d.entropy).String()
}

// rows generates a chunk's rows.
func (d *historyDay) rows(evs []historyEvent) *historyRows {
	r := &historyRows{}
	for _, ev := range evs {
		p := d.world.projects[d.rng.IntN(len(d.world.projects))]
		typ := historyEventTypes[d.rng.IntN(len(historyEventTypes))]
		eventID := d.id("evt_", ev.at)
		var externalID *string
		if d.rng.IntN(10) < 3 {
			x := "ext-" + eventID[4:]
			externalID = &x
		}
		r.events = append(r.events, []any{eventID, p.id, typ, d.payload(typ, ev.at), externalID, ev.at})
		for _, k := range d.rng.Perm(len(p.endpoints))[:ev.fanout] {
			d.delivery(r, p.id, eventID, typ, p.endpoints[k], ev.at)
		}
	}
	return r
}

// attemptResult is one attempt's outcome.
type attemptResult struct {
	status *int
	err    *string
	body   string
}

func statusResult(code int, body string) attemptResult {
	return attemptResult{status: &code, body: body}
}
func errorResult(msg string) attemptResult { return attemptResult{err: &msg} }

// outcomes picks what a delivery's attempts got: most succeed at once,
// about 5% after 1 to 3 failures, about 1% become dead letters (four in
// five after the whole schedule, the rest at once on a 4xx).
func (d *historyDay) outcomes() (results []attemptResult, reason string) {
	failure := func() attemptResult {
		switch d.rng.IntN(4) {
		case 0:
			return statusResult(500, `{"error":"internal server error"}`)
		case 1:
			return statusResult(503, "upstream unavailable")
		case 2:
			return errorResult("dial tcp: connect: connection refused")
		}
		return errorResult("timeout awaiting response headers")
	}
	ok := statusResult(200, `{"received":true}`)
	switch u := d.rng.Float64(); {
	case u < 0.002:
		return []attemptResult{statusResult(400, `{"error":"unknown event type"}`)}, "client_error"
	case u < 0.01:
		for range len(historySchedule) + 1 {
			results = append(results, failure())
		}
		return results, "exhausted"
	case u < 0.06:
		for range 1 + d.rng.IntN(3) {
			results = append(results, failure())
		}
		return append(results, ok), ""
	}
	return []attemptResult{ok}, ""
}

// delivery adds a finished delivery of the event to ep, its attempts and
// (if it failed) its dead letter. Times: the first attempt starts a
// moment after the event, each retry after the schedule's wait past the
// previous attempt's end, and the delivery is updated when its last ends.
func (d *historyDay) delivery(r *historyRows, projectID, eventID, typ string, ep historyEndpoint, at time.Time) {
	deliveryID := d.id("dlv_", at)
	results, reason := d.outcomes()
	start := at.Add(time.Duration(5+d.rng.IntN(500)) * time.Millisecond)
	var end time.Time
	for i, res := range results {
		if i > 0 {
			start = end.Add(historySchedule[i-1] + time.Duration(d.rng.IntN(1000))*time.Millisecond)
		}
		durationMS := int64(20 + d.rng.IntN(280))
		if res.err != nil && *res.err != "dial tcp: connect: connection refused" {
			durationMS = 30000 // the response timeout
		}
		start = start.Truncate(time.Microsecond)
		end = start.Add(time.Duration(durationMS) * time.Millisecond)
		requestID := d.id("req_", start)
		r.attempts = append(r.attempts, []any{requestID, deliveryID, i + 1, ep.url, "auto", res.status, res.err,
			durationMS, start, d.requestHeaders(eventID, typ, requestID, i+1, start), responseHeaders(res, end), res.body})
	}
	last := results[len(results)-1]
	status := "succeeded"
	if reason != "" {
		status = "dead_letter"
		r.deadLetters = append(r.deadLetters, []any{d.id("dl_", end), projectID, deliveryID, eventID, ep.id, typ, reason,
			last.status, end})
	}
	r.deliveries = append(r.deliveries, []any{deliveryID, projectID, eventID, ep.id, typ, status, len(results),
		len(results), last.status, last.err, at, end})
}

// requestHeaders are the headers an attempt was sent with, as wire.Sender
// records them, in canonical form (the signature included: the archive
// must leave it out).
func (d *historyDay) requestHeaders(eventID, typ, requestID string, number int, at time.Time) []byte {
	sig := make([]byte, 32)
	d.entropy.Read(sig)
	return fmt.Appendf(nil, `{"Content-Type":"application/json","User-Agent":"webhookd/history","Webhook-Id":%q,`+
		`"Webhook-Timestamp":"%d","Webhook-Signature":"v1,%s","X-Event-Id":%q,"X-Event-Type":%q,`+
		`"X-Delivery-Attempt":"%d","X-Request-Id":%q}`,
		eventID, at.Unix(), base64.StdEncoding.EncodeToString(sig), eventID, typ, number, requestID)
}

// responseHeaders are what a receiver answered with, or {} without an
// answer.
func responseHeaders(res attemptResult, at time.Time) []byte {
	if res.status == nil {
		return []byte(`{}`)
	}
	return fmt.Appendf(nil, `{"Content-Type":"application/json","Date":%q,"Content-Length":"%d"}`,
		at.Format(time.RFC1123), len(res.body))
}

// payload is an event's data: an object of the type's kind with a
// customer, a few lines and a description that brings it to about
// d.payloadBytes (between half and one and a half times that).
func (d *historyDay) payload(typ string, at time.Time) []byte {
	target := d.payloadBytes/2 + d.rng.IntN(d.payloadBytes+1)
	n := d.rng.IntN(1_000_000)
	b := fmt.Appendf(nil, `{"id":"obj_%07d","object":%q,"created":%d,"amount":%d,"currency":"usd",`+
		`"customer":{"id":"cus_%06d","email":"user%d@example.com","name":"Customer %d"},"lines":[`,
		n, typ, at.Unix(), 100+d.rng.IntN(100000), n%50000, n, n)
	for i := range 1 + d.rng.IntN(3) {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"id":"li_%d","quantity":%d,"amount":%d}`, i+1, 1+d.rng.IntN(5), 100+d.rng.IntN(5000))
	}
	b = append(b, `],"metadata":{"source":"history"},"description":"`...)
	for len(b) < target-2 {
		b = append(b, payloadWords[d.rng.IntN(len(payloadWords))]...)
		b = append(b, ' ')
	}
	return append(b, `"}`...)
}
