package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/webhookd/webhookd"
)

// ClaimMode says which state a delivery must be in for an attempt to lease it.
type ClaimMode int32

// Claim modes.
const (
	// ClaimAuto takes the automatic attempt due now: the delivery is
	// pending or retrying and its next_attempt_at has come.
	ClaimAuto ClaimMode = iota
	// ClaimManual takes a recorded redelivery request: the delivery's
	// manual_request_id is still Claim.RequestID, whatever its state.
	ClaimManual
	// ClaimReplay takes a dead letter for a replay job: only while the
	// delivery is still a dead letter.
	ClaimReplay
	// ClaimAny takes the delivery whatever its state (an attempt that never
	// changes it, such as the inspector's, and tests).
	ClaimAny
)

// Claim asks for the lease of one delivery for one attempt.
type Claim struct {
	DeliveryID string
	Token      string // the lease owner: the attempt's request id
	Mode       ClaimMode
	RequestID  string // ClaimManual: the redelivery request served
	// Worker is the worker process making the attempt (its heartbeat's
	// id): once it stops beating, VoidDeadLeases frees the lease. "": the
	// lease only runs out.
	Worker string
}

// Lease is what a Claim found: the delivery with its event and endpoint as
// they were when the claim ran, and whether the lease is now the claim's.
type Lease struct {
	Found           bool // false: no such delivery (purged)
	Held            bool // the claim holds the lease
	Token           string
	OtherUntil      *time.Time // when someone else's lease runs out, if one was held
	Delivery        webhookd.Delivery
	AutoAttempts    int // automatic attempts made so far
	Event           webhookd.Event
	Endpoint        webhookd.Endpoint
	EndpointDeleted bool
	MaxInFlight     *int // the endpoint's max_in_flight
	Failures        int  // the endpoint's consecutive failed attempts (its breaker's count)
	// FIFO: the delivery has a place in its ordered endpoint's queue.
	// Behind says a delivery ahead of it is still waiting, so an automatic
	// claim could not take it: its turn comes when those ahead are done.
	FIFO, Behind  bool
	Trigger       string  // what automatic attempts are logged as: auto or test
	ManualRequest *string // the redelivery asked for and not yet made, if any
	ManualBy      *string // who asked for it
	// Now is PostgreSQL's time when the claim ran: the one clock that
	// times compared between processes come from (SPEC §1).
	Now time.Time
	// TraceParent is the W3C traceparent its event was written under
	// (NewEvent.TraceParent), the parent of the attempt's span; "" for
	// none.
	TraceParent string
	// SecretErr (ErrSecretUnreadable) says the endpoint's secrets cannot
	// be opened here, so nothing can be signed: the attempt fails with it
	// unsent. Endpoint.Secret is then not the secret.
	SecretErr error
}

// ClaimDeliveries leases the deliveries cs name, each while it is free (no
// lease, or one that ran out at now) and in the state its mode asks for,
// until until. now is the caller's idea of PostgreSQL's time, which lags
// it by a round trip at least: the later of it and PostgreSQL's own is
// the time due and lease times are compared with. All claims travel in one statement and one commit; the
// result has one Lease per claim, in order. Two claims of one delivery in
// one call: at most one holds it.
//
// A claim is idempotent for its token: a lease the claim's token holds
// already is taken again (to until). A call that committed and then
// failed (the connection dropped before the answer, a row could not be
// read) can so be made again with the same claims and gets the same
// answer, instead of finding its own leases taken until they run out.
//
// The commit does not wait for the WAL to reach disk
// (synchronous_commit off for this transaction alone): a claim lost in a
// PostgreSQL crash is a lease that ended early, after which the delivery
// is due again, as after any lease that runs out. Records, which must not
// be lost, commit durably.
func (db *DB) ClaimDeliveries(ctx context.Context, now, until time.Time, cs []Claim) ([]Lease, error) {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.DeliveryID
	}
	// The claim joins its rows to deliveries, events and endpoints by key:
	// planSettings keeps its generic plan to index lookups. It names the
	// partitions of the day its deliveries are in (dayRoutes), one
	// statement a day, all in one batch.
	out := make([]Lease, len(cs))
	b := &pgx.Batch{}
	b.Queue(planSettings)
	suffixes, groups := db.days.byDay(ctx, db.pool, ids)
	for g, group := range groups {
		n := len(group)
		gids, tokens, modes, reqs, workers := make([]string, n), make([]string, n), make([]int32, n), make([]string, n), make([]string, n)
		for j, i := range group {
			c := cs[i]
			gids[j], tokens[j], modes[j], reqs[j], workers[j] = c.DeliveryID, c.Token, int32(c.Mode), c.RequestID, c.Worker
		}
		b.Queue(claimSQL(suffixes[g]), gids, tokens, modes, reqs, now, until, workers).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var (
					ord     int
					l       Lease
					deleted *time.Time
				)
				d, ev, ep := &l.Delivery, &l.Event, &l.Endpoint
				if err := rows.Scan(&ord, &l.Held, &d.ID, &d.ProjectID, &d.EventID, &d.EndpointID, &d.EventType, &d.Status,
					&d.AttemptsCount, &d.NextAttemptAt, &d.LastStatusCode, &d.LastError, &d.CreatedAt, &d.UpdatedAt, &d.WaitingReason,
					&l.AutoAttempts, &l.OtherUntil,
					&ev.Type, &ev.Data, &ev.ExternalID, &ev.CreatedAt,
					&ep.URL, &ep.Status, &ep.Secret, &ep.PreviousSecret, &ep.PreviousExpiresAt, &ep.RateLimitPerSecond, &deleted,
					&l.MaxInFlight, &l.Trigger, &l.ManualRequest, &l.ManualBy, &ep.Circuit, &ep.ProbeAt, &l.Failures,
					&l.FIFO, &l.Behind, &l.Now, &l.TraceParent, &ep.Transformation); err != nil {
					return err
				}
				// A secret this process cannot open fails this claim's attempt
				// alone: failing the call would fail every claim beside it, on
				// every try, and the delivery would never run out of attempts.
				l.SecretErr = db.box.openSecrets(&ep.Secret, &ep.PreviousSecret)
				i := group[ord-1]
				l.Found, l.Token = true, cs[i].Token
				ev.ID, ev.ProjectID = d.EventID, d.ProjectID
				ep.ID, ep.ProjectID = d.EndpointID, d.ProjectID
				l.EndpointDeleted = deleted != nil
				if l.Held {
					l.OtherUntil = nil
				}
				out[i] = l
			}
			return rows.Err()
		})
	}
	if err := db.pool.SendBatch(ctx, b).Close(); err != nil {
		db.days.forget(err)
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	return out, nil
}

// claimSQL is the claim of deliveries in the day partitions of suffix (the
// parents for "").
func claimSQL(suffix string) string { return claimSQLs.get(suffix) }

var claimSQLs = daySQL{build: func(suffix string) string {
	return strings.NewReplacer("{deliveries}", partition("deliveries", suffix), "{events}", partition("events", suffix)).
		Replace(claimTemplate)
}}

// claimTemplate is ClaimDeliveries' statement, with the tables it looks
// rows up in by key as {deliveries} and {events}. Whether a FIFO delivery
// has one ahead of it is asked of webhookd_fifo_ahead (migration 25), a
// PL/pgSQL function over all of deliveries, whose plan (and the locks of
// every partition it names) is only run for a FIFO delivery.
const claimTemplate = `WITH c AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $7::text[]) WITH ORDINALITY AS c(id, token, mode, request_id, worker, ord)
			WHERE set_config('synchronous_commit', 'off', true) = 'off'
		), held AS (
			UPDATE {deliveries} d SET lease_owner = c.token, lease_until = $6, lease_worker = NULLIF(c.worker, ''),
				waiting_reason = NULL
			FROM c WHERE d.id = c.id AND (d.lease_until IS NULL OR d.lease_until <= greatest($5, now())
				OR d.lease_owner = c.token) AND CASE c.mode
				WHEN 0 THEN d.status IN ('pending', 'retrying') AND d.next_attempt_at <= greatest($5, now())
					AND (d.fifo_seq IS NULL OR NOT webhookd_fifo_ahead(d.endpoint_id, d.fifo_seq))
				WHEN 1 THEN d.manual_request_id = c.request_id
				WHEN 2 THEN d.status = 'dead_letter'
				WHEN 3 THEN true
				ELSE false END
			RETURNING c.token
		)
		SELECT c.ord, held.token IS NOT NULL, ` + deliveryColumns + `, d.auto_attempts, d.lease_until,
			e.type, e.data, e.external_id, e.created_at,
			p.url, p.status, p.secret, p.previous_secret, p.previous_expires_at, p.rate_limit_per_second, p.deleted_at,
			p.max_in_flight, d.trigger, d.manual_request_id, d.manual_requested_by, p.circuit, p.probe_at, p.failures,
			d.fifo_seq IS NOT NULL, d.fifo_seq IS NOT NULL AND webhookd_fifo_ahead(d.endpoint_id, d.fifo_seq), now(), coalesce(e.trace_parent, ''),
			p.transformation
		FROM c JOIN {deliveries} d ON d.id = c.id JOIN {events} e ON e.id = d.event_id JOIN endpoints p ON p.id = d.endpoint_id
			LEFT JOIN held ON held.token = c.token`

// FIFOHead returns the delivery at the head of an ordered endpoint's queue
// (the first still waiting), or "" when the queue is empty.
func (db *DB) FIFOHead(ctx context.Context, endpointID string) (string, error) {
	var id string
	err := db.pool.QueryRow(ctx, `SELECT id FROM deliveries WHERE endpoint_id = $1 AND fifo_seq IS NOT NULL
		AND status IN ('pending', 'retrying') ORDER BY fifo_seq LIMIT 1`, endpointID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("head of the queue of %s: %w", endpointID, err)
	}
	return id, nil
}

// FIFOHeads returns the head of every ordered endpoint's queue that is due
// at now and not leased: the reconciler's look for a queue whose next
// delivery nobody was told to make (its predecessor's worker died between
// recording it and waking the next).
func (db *DB) FIFOHeads(ctx context.Context, now time.Time) ([]webhookd.ScheduledDelivery, error) {
	rows, err := db.pool.Query(ctx, `SELECT id, endpoint_id, next_attempt_at FROM (
			SELECT DISTINCT ON (endpoint_id) id, endpoint_id, next_attempt_at, lease_until FROM deliveries
			WHERE fifo_seq IS NOT NULL AND status IN ('pending', 'retrying') ORDER BY endpoint_id, fifo_seq) h
		WHERE next_attempt_at <= $1 AND (lease_until IS NULL OR lease_until <= $1)`, now)
	if err != nil {
		return nil, fmt.Errorf("heads of ordered queues: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhookd.ScheduledDelivery, error) {
		var s webhookd.ScheduledDelivery
		err := r.Scan(&s.ID, &s.EndpointID, &s.DueAt)
		return s, err
	})
}

// Transition is the state a delivery moves to after an attempt (or without
// one, when its endpoint is disabled or its transformation canceled it).
type Transition struct {
	Status           string     // the new delivery status
	NextAttemptAt    *time.Time // for pending and retrying
	DeadLetterReason string     // when Status is dead_letter
	DisableEndpoint  bool       // 410 Gone: disable with reason gone
	ReplayedBy       string     // who replayed, when a dead letter now succeeded
	// ManualDone clears the delivery's pending redelivery request: this
	// attempt was it.
	ManualDone bool
	// Auto says the attempt was an automatic one: it counts towards the
	// retry schedule.
	Auto bool
	// Waiting is the delivery's waiting_reason afterwards; "" with a
	// retrying status and a NextAttemptAt means the schedule's wait.
	Waiting string
	Now     time.Time
}

// Record is the end of one leased attempt: the attempt made (nil for none)
// and the state the delivery moves to.
type Record struct {
	Lease      *Lease
	Attempt    *webhookd.Attempt
	Transition Transition
}

// RecordAttempts records each attempt and moves its delivery, and gives the
// lease up, where the record's lease is still held; the rest change
// nothing. All records travel in one statement and one commit. The first
// result tells, in order, which records were applied. Two records of one
// delivery in one call (an attempt whose lease ran out, beside the new
// holder's): only the holder's applies, and only its attempt is logged.
//
// The operational events of what the records did are written in the same
// transaction (recordEvents): webhookd.delivery.dead_lettered for each
// delivery that became a dead letter, webhookd.endpoint.disabled for each
// endpoint a 410 disabled. The second result are their deliveries, to
// enqueue once RecordAttempts has returned. A call none of whose records
// can do either runs as one implicit transaction, without the extra round
// trips of an explicit one: it is the hottest statement there is.
func (db *DB) RecordAttempts(ctx context.Context, rs []Record) ([]bool, []webhookd.ScheduledDelivery, error) {
	// Routed before a transaction holds a connection: a day not known yet
	// is read from the pool.
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.Lease.Delivery.ID
	}
	suffixes, groups := db.days.byDay(ctx, db.pool, ids)
	if !slices.ContainsFunc(rs, mayTell) {
		applied, _, err := runRecords(ctx, db.pool, rs, suffixes, groups, false)
		if err != nil {
			db.days.forget(err)
			return nil, nil, fmt.Errorf("record attempts: %w", err)
		}
		return applied, nil, nil
	}
	var (
		applied []bool
		ds      []webhookd.ScheduledDelivery
	)
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var (
			disabled []bool
			err      error
		)
		if applied, disabled, err = runRecords(ctx, tx, rs, suffixes, groups, true); err != nil {
			return err
		}
		made, err := insertOperationalEvents(ctx, tx, recordEvents(rs, applied, disabled))
		for _, m := range made {
			ds = append(ds, m...)
		}
		return err
	})
	if err != nil {
		db.days.forget(err)
		return nil, nil, fmt.Errorf("record attempts: %w", err)
	}
	return applied, ds, nil
}

// mayTell says whether r, if applied, has an operational event to write:
// its delivery becomes a dead letter now, or a 410 disables its endpoint.
func mayTell(r Record) bool { return r.Transition.DisableEndpoint || tellsDeadLetter(r) }

// tellsDeadLetter says whether r makes its delivery a dead letter now (it
// was not one) and tells of it. A delivery of an operational event does
// not: two failing endpoints would tell each other forever.
func tellsDeadLetter(r Record) bool {
	t, d := r.Transition, r.Lease.Delivery
	return t.Status == webhookd.DeliveryDeadLetter && d.Status != webhookd.DeliveryDeadLetter &&
		!strings.HasPrefix(d.EventType, webhookd.ReservedTypePrefix)
}

// recordEvents are the operational events of the records applied: a
// dead_lettered per delivery that became a dead letter, and an
// endpoint.disabled per endpoint the statement disabled (disabled marks
// one record of each), each at its record's time.
func recordEvents(rs []Record, applied, disabled []bool) []operationalEvent {
	var evs []operationalEvent
	for i, r := range rs {
		if !applied[i] {
			continue
		}
		t, d := r.Transition, r.Lease.Delivery
		if tellsDeadLetter(r) {
			code := d.LastStatusCode
			if r.Attempt != nil {
				code = r.Attempt.StatusCode
			}
			evs = append(evs, operationalEvent{projectID: d.ProjectID, about: d.EndpointID, typ: webhookd.EventDeliveryDeadLetter,
				at: t.Now, data: map[string]any{"delivery_id": d.ID, "event_id": d.EventID, "endpoint_id": d.EndpointID,
					"event_type": d.EventType, "reason": t.DeadLetterReason, "last_status_code": code}})
		}
		if disabled[i] {
			evs = append(evs, operationalEvent{projectID: d.ProjectID, about: d.EndpointID, typ: webhookd.EventEndpointDisabled,
				at: t.Now, data: map[string]any{"endpoint_id": d.EndpointID, "disabled_reason": webhookd.DisabledGone}})
		}
	}
	return evs
}

// batchSender is a pool, or a transaction in it.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// runRecords runs recordSQL for rs (recordArgs) and tells, per record,
// whether it applied and whether it is the one that disabled its endpoint.
// more: statements follow in the same transaction.
//
// The statement joins its rows to deliveries by id. Planned each time, it
// spent more time in the planner than in the executor; left to the plan
// cache, its generic plan, made while the table was young and not yet
// analyzed, would scan the whole table on every run as it grows. So it
// runs a generic plan made without sequential scans (planSettings); with
// more, the settings are put back after it for the statements that follow.
// It names the partitions of the day its deliveries are in (dayRoutes.byDay
// gave suffixes and groups): one statement a day, all in one batch.
func runRecords(ctx context.Context, q batchSender, rs []Record, suffixes []string, groups [][]int, more bool) (applied, disabled []bool, err error) {
	applied, disabled = make([]bool, len(rs)), make([]bool, len(rs))
	b := &pgx.Batch{}
	b.Queue(planSettings)
	for g, group := range groups {
		sub := make([]Record, len(group))
		for j, i := range group {
			sub[j] = rs[i]
		}
		b.Queue(recordSQL(suffixes[g]), recordArgs(sub)...).Query(func(rows pgx.Rows) error {
			var (
				ord int
				dis bool
			)
			_, err := pgx.ForEachRow(rows, []any{&ord, &dis}, func() error {
				applied[group[ord-1]], disabled[group[ord-1]] = true, dis
				return nil
			})
			return err
		})
	}
	if more {
		b.Queue(resetPlanSettings)
	}
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, err
	}
	return applied, disabled, nil
}

// recordArgs are recordSQL's arguments for rs: one array per column.
func recordArgs(rs []Record) []any {
	n := len(rs)
	var (
		ids, tokens, statuses, dlOps, dlIDs, dlReasons, replayedBy = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		waiting                                                    = make([]string, n)
		counts, autos                                              = make([]int32, n), make([]int32, n)
		nexts                                                      = make([]*time.Time, n)
		nows                                                       = make([]time.Time, n)
		codes                                                      = make([]*int, n)
		errTexts                                                   = make([]*string, n)
		manualDone, disable                                        = make([]bool, n), make([]bool, n)
		aNumbers                                                   = make([]*int32, n)
		aReqIDs, aURLs, aTriggers, aBodies                         = make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		aDurations                                                 = make([]*int64, n)
		aStarted                                                   = make([]*time.Time, n)
		aReqH, aRespH                                              = make([]*string, n), make([]*string, n)
		aTraceIDs                                                  []string // nil until an attempt has one (tracing off: none)
	)
	for i, r := range rs {
		l, t, d := r.Lease, r.Transition, r.Lease.Delivery
		ids[i], tokens[i], statuses[i] = d.ID, l.Token, t.Status
		counts[i], autos[i] = int32(d.AttemptsCount), int32(l.AutoAttempts)
		codes[i], errTexts[i] = d.LastStatusCode, d.LastError
		nexts[i], nows[i], manualDone[i], disable[i], replayedBy[i] = t.NextAttemptAt, t.Now, t.ManualDone, t.DisableEndpoint, t.ReplayedBy
		waiting[i] = t.Waiting
		if waiting[i] == "" && t.Status == webhookd.DeliveryRetrying && t.NextAttemptAt != nil {
			waiting[i] = webhookd.WaitingSchedule
		}
		if a := r.Attempt; a != nil {
			counts[i], codes[i], errTexts[i] = int32(a.Number), a.StatusCode, a.Error
			if t.Auto {
				autos[i]++
			}
			num, dur := int32(a.Number), a.DurationMS
			rh, sh := headersJSON(a.RequestHeaders), headersJSON(a.ResponseHeaders)
			aNumbers[i], aReqIDs[i], aURLs[i], aTriggers[i], aBodies[i] = &num, &a.RequestID, &a.URL, &a.Trigger, &a.ResponseBody
			aDurations[i], aStarted[i], aReqH[i], aRespH[i] = &dur, &a.StartedAt, &rh, &sh
			if a.TraceID != "" {
				if aTraceIDs == nil {
					aTraceIDs = make([]string, n)
				}
				aTraceIDs[i] = a.TraceID
			}
		}
		switch {
		case t.Status == webhookd.DeliveryDeadLetter && d.Status != webhookd.DeliveryDeadLetter:
			dlOps[i], dlIDs[i], dlReasons[i] = "insert", newID(prefixDeadLetter), t.DeadLetterReason
		case t.Status == webhookd.DeliveryDeadLetter:
			dlOps[i] = "update"
		case t.Status == webhookd.DeliverySucceeded && d.Status == webhookd.DeliveryDeadLetter:
			dlOps[i] = "replayed"
		}
	}
	// The columns of pointers go as pgtype.FlatArray: as plain slices
	// pgx would encode them through reflection, boxing every element.
	return []any{ids, tokens, statuses, counts, autos, pgtype.FlatArray[*time.Time](nexts), pgtype.FlatArray[*int](codes),
		pgtype.FlatArray[*string](errTexts), manualDone, dlOps, dlIDs, dlReasons, replayedBy, disable,
		nows, pgtype.FlatArray[*int32](aNumbers), pgtype.FlatArray[*string](aReqIDs), pgtype.FlatArray[*string](aURLs),
		pgtype.FlatArray[*string](aTriggers), pgtype.FlatArray[*int64](aDurations), pgtype.FlatArray[*time.Time](aStarted),
		pgtype.FlatArray[*string](aReqH), pgtype.FlatArray[*string](aRespH), pgtype.FlatArray[*string](aBodies), waiting,
		aTraceIDs}
}

// recordSQL is recordTemplate for deliveries in the day partitions of
// suffix (the parents for "").
func recordSQL(suffix string) string { return recordSQLs.get(suffix) }

var recordSQLs = daySQL{build: func(suffix string) string {
	return strings.NewReplacer("{deliveries}", partition("deliveries", suffix),
		"{dead_letters}", partition("dead_letters", suffix)).Replace(recordTemplate)
}}

// recordTemplate applies records where their lease is held, and returns
// the ordinal of each record applied, with whether it disabled its
// endpoint (one record per endpoint disabled). The rows it updates by key
// are in {deliveries} and {dead_letters}; it inserts through the parents,
// which open only the partition a row goes to.
const recordTemplate = `WITH r AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int4[], $5::int4[], $6::timestamptz[],
			$7::int4[], $8::text[], $9::bool[], $10::text[], $11::text[], $12::text[], $13::text[], $14::bool[],
			$15::timestamptz[], $16::int4[], $17::text[], $18::text[], $19::text[], $20::int8[], $21::timestamptz[],
			$22::jsonb[], $23::jsonb[], $24::text[], $25::text[], $26::text[]) WITH ORDINALITY
		AS r(id, token, status, attempts_count, auto_attempts, next_attempt_at,
			last_status_code, last_error, manual_done, dl_op, dl_id, dl_reason, replayed_by, disable,
			now, a_number, a_request_id, a_url, a_trigger, a_duration_ms, a_started_at,
			a_request_headers, a_response_headers, a_body, waiting, a_trace_id, ord)
	), u AS (
		UPDATE {deliveries} d SET status = r.status, attempts_count = r.attempts_count, auto_attempts = r.auto_attempts,
			next_attempt_at = r.next_attempt_at, waiting_reason = NULLIF(r.waiting, ''),
			last_status_code = r.last_status_code, last_error = r.last_error,
			updated_at = r.now,
			manual_request_id = CASE WHEN r.manual_done THEN NULL ELSE d.manual_request_id END,
			manual_requested_by = CASE WHEN r.manual_done THEN NULL ELSE d.manual_requested_by END,
			lease_owner = NULL, lease_until = NULL
		FROM r WHERE d.id = r.id AND d.lease_owner = r.token
		RETURNING r.ord, d.id, d.project_id, d.event_id, d.endpoint_id, d.event_type
	), a AS (
		INSERT INTO attempts (delivery_id, number, request_id, url, trigger, status_code, error,
			duration_ms, started_at, request_headers, response_headers, response_body, trace_id)
		SELECT r.id, r.a_number, r.a_request_id, r.a_url, r.a_trigger, r.last_status_code, r.last_error,
			r.a_duration_ms, r.a_started_at, r.a_request_headers, r.a_response_headers, r.a_body, NULLIF(r.a_trace_id, '')
		FROM r JOIN u ON u.ord = r.ord WHERE r.a_number IS NOT NULL
	), dl AS (
		INSERT INTO dead_letters (id, project_id, delivery_id, event_id, endpoint_id, event_type,
			reason, last_status_code, dead_lettered_at)
		SELECT r.dl_id, u.project_id, u.id, u.event_id, u.endpoint_id, u.event_type, r.dl_reason, r.last_status_code, r.now
		FROM r JOIN u ON u.ord = r.ord WHERE r.dl_op = 'insert'
		ON CONFLICT (delivery_id) DO UPDATE SET reason = EXCLUDED.reason, last_status_code = EXCLUDED.last_status_code,
			dead_lettered_at = EXCLUDED.dead_lettered_at, replayed_at = NULL, replayed_by = NULL
	), dlu AS (
		UPDATE {dead_letters} x SET
			last_status_code = CASE WHEN r.dl_op = 'update' THEN r.last_status_code ELSE x.last_status_code END,
			replayed_at = CASE WHEN r.dl_op = 'replayed' THEN r.now ELSE x.replayed_at END,
			replayed_by = CASE WHEN r.dl_op = 'replayed' THEN r.replayed_by ELSE x.replayed_by END
		FROM r JOIN u ON u.ord = r.ord WHERE x.delivery_id = r.id AND r.dl_op IN ('update', 'replayed')
	), ep AS (
		UPDATE endpoints p SET status = 'disabled', disabled_reason = 'gone', version = p.version + 1, updated_at = r.now
		FROM r JOIN u ON u.ord = r.ord WHERE p.id = u.endpoint_id AND r.disable AND p.status = 'active'
		RETURNING r.ord
	)
	SELECT u.ord, ep.ord IS NOT NULL FROM u LEFT JOIN ep ON ep.ord = u.ord`

// planSettings makes the statements after it in a transaction run one
// generic plan each, made without sequential or bitmap scans. The hot
// statements look rows up by key: with an index they cost the same at any
// table size, while a plan made from a young, unanalyzed table may scan the
// whole table (or, with sequential scans alone ruled out, read a whole
// index in a bitmap scan), and a custom plan per run costs as much as the
// run itself.
const planSettings = `SELECT ` + genericPlans

// genericPlans is planSettings' select list.
const genericPlans = `set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
	set_config('enable_bitmapscan', 'off', true)`

// resetPlanSettings puts the settings of planSettings back to the
// session's for the rest of the transaction.
const resetPlanSettings = `SELECT set_config(name, reset_val, true) FROM pg_settings
	WHERE name IN ('plan_cache_mode', 'enable_seqscan', 'enable_bitmapscan')`

// ReleaseLease gives one lease up: ReleaseLeases of one release.
func (db *DB) ReleaseLease(ctx context.Context, deliveryID, token, reason string, at time.Time) (bool, error) {
	waits, err := db.ReleaseLeases(ctx, []Release{{DeliveryID: deliveryID, Token: token, Reason: reason, At: at}})
	if err != nil {
		return false, err
	}
	return waits[0], nil
}

// Release gives up a lease held by Token whose attempt was not made (its
// endpoint had no room, or its circuit is open). With a Reason, a delivery
// that still waits for an automatic attempt waits until At for it (its
// next_attempt_at and waiting_reason); without one (a manual attempt held
// back), its schedule is left as it is.
type Release struct {
	DeliveryID, Token, Reason string
	At                        time.Time
}

// ReleaseLeases gives leases up without a change but the wait, each where
// its token still holds it, one statement per day of the deliveries in one
// batch (dayRoutes): the releases of concurrent attempts travel together.
// A wait for an open circuit applies only while the circuit is still open,
// read under the endpoint row's lock (taken in id order, as ApplyCircuit
// takes its own): a close that committed meanwhile (which turns the
// circuit's waiters into waiters for room) leaves the delivery due now
// instead, and its false says so. A relay endpoint's deliveries wait for a
// listener whatever its circuit (a listener that connects wakes them:
// WakeRelay). Every other release reports true, as does one whose lease
// was not its token's any more. Like a claim, it need not reach disk
// before the commit returns: lost in a crash, it is a lease that runs out.
func (db *DB) ReleaseLeases(ctx context.Context, rs []Release) ([]bool, error) {
	waits := make([]bool, len(rs))
	if len(rs) == 0 {
		return waits, nil
	}
	all := make([]string, len(rs))
	for i, r := range rs {
		all[i], waits[i] = r.DeliveryID, true
	}
	b := &pgx.Batch{}
	suffixes, groups := db.days.byDay(ctx, db.pool, all)
	for g, group := range groups {
		ids, tokens, reasons, ats := make([]string, len(group)), make([]string, len(group)), make([]string, len(group)),
			make([]time.Time, len(group))
		for j, i := range group {
			ids[j], tokens[j], reasons[j], ats[j] = rs[i].DeliveryID, rs[i].Token, rs[i].Reason, rs[i].At
		}
		d := partition("deliveries", suffixes[g])
		b.Queue(`WITH r AS (
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) WITH ORDINALITY AS r(id, token, reason, at, ord)
			), open AS (
				SELECT p.id FROM endpoints p
				WHERE p.id IN (SELECT d.endpoint_id FROM `+d+` d JOIN r ON d.id = r.id WHERE r.reason = 'circuit_open')
					AND (p.circuit <> 'closed' OR `+isRelay+`)
				ORDER BY p.id FOR SHARE OF p
			), w AS (
				SELECT r.*, r.reason <> '' AND (r.reason <> 'circuit_open' OR EXISTS (SELECT 1 FROM `+d+` d
					JOIN open o ON o.id = d.endpoint_id WHERE d.id = r.id)) AS waits FROM r
			)
			UPDATE `+d+` d SET lease_owner = NULL, lease_until = NULL,
				next_attempt_at = CASE WHEN w.reason = '' OR d.status NOT IN ('pending', 'retrying') THEN d.next_attempt_at
					WHEN w.waits THEN CASE WHEN w.reason = 'circuit_open' THEN w.at ELSE `+keepPlace("w.at", "d.next_attempt_at", "$5")+` END
					ELSE least(d.next_attempt_at, now()) END,
				waiting_reason = CASE WHEN w.reason = '' OR d.status NOT IN ('pending', 'retrying') THEN d.waiting_reason
					WHEN w.waits THEN w.reason END
			FROM w WHERE d.id = w.id AND d.lease_owner = w.token AND set_config('synchronous_commit', 'off', true) = 'off'
			RETURNING w.ord, w.reason = '' OR w.waits`, ids, tokens, reasons, ats, HoldFor).Query(func(rows pgx.Rows) error {
			var (
				ord  int64
				held bool
			)
			_, err := pgx.ForEachRow(rows, []any{&ord, &held}, func() error {
				waits[group[ord-1]] = held
				return nil
			})
			return err
		})
	}
	if err := db.pool.SendBatch(ctx, b).Close(); err != nil {
		db.days.forget(err)
		return nil, fmt.Errorf("release leases: %w", err)
	}
	return waits, nil
}

// headersJSON is an attempt's header map as the JSON object its column
// keeps (keys sorted).
func headersJSON(h map[string]string) string {
	b, _ := json.Marshal(h) // a map of strings always encodes
	return string(b)
}
