package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Hold is a delivery an automatic attempt held back before claiming it
// (its endpoint had no room, its rate was spent, or it waits its turn in an
// ordered queue): it waits for Reason until Until, or, with no Until, at
// the time it already had (fifo_turn: its turn has no time of its own).
// A delivery behind others in its ordered endpoint's queue waits for its
// turn whatever the hold's reason: the turn, not a freed slot, ends its
// wait, and a time an hour ahead would hold up the queue once it is the
// head (FIFOHeads offers only due heads).
type Hold struct {
	DeliveryID string
	Reason     string
	Until      *time.Time
}

// HoldBack records holds: each delivery's waiting_reason, and its
// next_attempt_at where a hold has a time. A hold applies only to a
// delivery that still waits for an automatic attempt and that nobody
// holds, and (with a time) that was due at now: one that an attempt took
// meanwhile keeps what that attempt wrote.
func (db *DB) HoldBack(ctx context.Context, now time.Time, hs []Hold) error {
	if len(hs) == 0 {
		return nil
	}
	all := make([]string, len(hs))
	for i, h := range hs {
		all[i] = h.DeliveryID
	}
	// One statement per day of the deliveries, naming its partition
	// (dayRoutes), all in one batch. behind is evaluated only for an
	// ordered endpoint's delivery: the others pay nothing for it.
	behind := "d.fifo_seq IS NOT NULL AND webhookd_fifo_ahead(d.endpoint_id, d.fifo_seq)"
	b := &pgx.Batch{}
	suffixes, groups := db.days.byDay(ctx, db.pool, all)
	for g, group := range groups {
		ids, reasons, untils := make([]string, len(group)), make([]string, len(group)), make([]*time.Time, len(group))
		for j, i := range group {
			ids[j], reasons[j], untils[j] = hs[i].DeliveryID, hs[i].Reason, hs[i].Until
		}
		b.Queue(`UPDATE `+partition("deliveries", suffixes[g])+` d SET waiting_reason = CASE WHEN `+behind+` THEN 'fifo_turn' ELSE w.reason END,
			next_attempt_at = CASE WHEN w.until IS NULL OR `+behind+` THEN d.next_attempt_at
				ELSE `+keepPlace("w.until", "d.next_attempt_at", "$5")+` END
		FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS w(id, reason, until)
		WHERE d.id = w.id AND d.status IN ('pending', 'retrying')
			AND (d.lease_until IS NULL OR d.lease_until <= greatest($4, now()))
			AND (w.until IS NULL OR d.next_attempt_at <= greatest($4, now()))
			AND set_config('synchronous_commit', 'off', true) = 'off'`, ids, reasons, untils, now, HoldFor)
	}
	if err := db.pool.SendBatch(ctx, b).Close(); err != nil {
		db.days.forget(err)
		return fmt.Errorf("hold back deliveries: %w", err)
	}
	return nil
}

// WakeWaiting makes up to n deliveries of endpoint ep that its room held
// back (endpoint_busy, rate_limit) due, the longest-waiting first, at the
// instant each was held (keepPlace), and returns them: a slot of ep freed. Deliveries another caller is
// waking are skipped, not waited for. Lost in a crash, a wake is a
// delivery that waits on (the reconciler finds it: StrandedEndpoints).
func (db *DB) WakeWaiting(ctx context.Context, ep string, n int, now time.Time) ([]string, error) {
	rows, err := db.pool.Query(ctx, `UPDATE deliveries d SET next_attempt_at = least($3, d.next_attempt_at - $4::interval),
			waiting_reason = NULL
		FROM (SELECT id FROM deliveries WHERE endpoint_id = $1 AND waiting_reason IN ('endpoint_busy', 'rate_limit')
			AND status IN ('pending', 'retrying') ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED) w
		WHERE d.id = w.id AND set_config('synchronous_commit', 'off', true) = 'off'
		RETURNING d.id`, ep, n, now, HoldFor)
	if err != nil {
		return nil, fmt.Errorf("wake deliveries of %s: %w", ep, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("wake deliveries of %s: %w", ep, err)
	}
	return ids, nil
}

// ProbeCandidate makes a delivery held by ep's open circuit due at now, if
// the circuit's probe is due, and returns it ("": none): the one with the
// fewest attempts, then the longest-waiting, so that failed probes spread
// over the waiting deliveries instead of spending one delivery's schedule.
// Its attempt then takes the probe (TakeProbe): one delivery per probe
// wakes, however many wait. A probe not yet due returns its time.
func (db *DB) ProbeCandidate(ctx context.Context, ep string, now time.Time) (string, *time.Time, error) {
	var (
		id      *string
		probeAt *time.Time
	)
	err := db.pool.QueryRow(ctx, `WITH p AS (SELECT probe_at FROM endpoints WHERE id = $1 AND circuit <> 'closed'),
		c AS (UPDATE deliveries SET next_attempt_at = $2, waiting_reason = NULL
			WHERE id = (SELECT d.id FROM deliveries d WHERE d.endpoint_id = $1 AND d.waiting_reason = 'circuit_open'
					AND d.status IN ('pending', 'retrying') ORDER BY d.attempts_count, d.next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED)
				AND (SELECT probe_at FROM p) <= $2
			RETURNING id)
		SELECT (SELECT id FROM c), (SELECT probe_at FROM p)`, ep, now).Scan(&id, &probeAt)
	switch {
	case err != nil:
		return "", nil, fmt.Errorf("probe candidate of %s: %w", ep, err)
	case id != nil:
		return *id, nil, nil
	case probeAt != nil && probeAt.After(now):
		return "", probeAt, nil
	}
	return "", nil, nil
}

// DueProbe is an open circuit whose probe is due.
type DueProbe struct {
	EndpointID string
	ProbeAt    time.Time
}

// DueProbes returns the endpoints whose circuit's probe was due before
// before and that have deliveries waiting for it: the reconciler's look for
// a probe whose wake-up was lost.
func (db *DB) DueProbes(ctx context.Context, before time.Time) ([]DueProbe, error) {
	rows, err := db.pool.Query(ctx, `SELECT p.id, p.probe_at FROM endpoints p
		WHERE p.circuit <> 'closed' AND p.probe_at < $1 AND EXISTS (SELECT 1 FROM deliveries d
			WHERE d.endpoint_id = p.id AND d.waiting_reason = 'circuit_open' AND d.status IN ('pending', 'retrying'))`, before)
	if err != nil {
		return nil, fmt.Errorf("due probes: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DueProbe, error) {
		var p DueProbe
		err := r.Scan(&p.EndpointID, &p.ProbeAt)
		return p, err
	})
}

// HoldFor is how far ahead a delivery held back for room at its endpoint
// has its next_attempt_at: a last resort, should no freed slot wake it.
const HoldFor = time.Hour

// keepPlace is the SQL for the next_attempt_at of a delivery held back for
// room (until: the hold's time, HoldFor ahead; next: the delivery's
// next_attempt_at; holdFor: HoldFor as an interval) that keeps its place
// among its endpoint's held deliveries, which wake in next_attempt_at
// order. A wake makes a held delivery due at the instant it was held
// (WakeWaiting), so one woken but held again — a new delivery took the
// slot first — goes back to where it was, not behind every later hold;
// one due a while ago waits at least half of HoldFor.
func keepPlace(until, next, holdFor string) string {
	return "least(" + until + "::timestamptz, greatest(" + next + ", " + until + "::timestamptz - 1.5 * " + holdFor + "::interval) + " +
		holdFor + "::interval)"
}

// HeldEndpoints returns the endpoints with deliveries held back for room
// (endpoint_busy, rate_limit) whose latest hold is older than settled:
// the reconciler wakes those of them that no live worker holds
// (EndpointLoads), which no freed slot will wake. Holds younger than
// settled are left out: the heartbeat of the worker that holds them may
// not have landed yet.
func (db *DB) HeldEndpoints(ctx context.Context, now time.Time, settled time.Duration) ([]string, error) {
	rows, err := db.pool.Query(ctx, `SELECT endpoint_id FROM deliveries
		WHERE waiting_reason IN ('endpoint_busy', 'rate_limit') AND status IN ('pending', 'retrying')
		GROUP BY endpoint_id HAVING max(next_attempt_at) < $1`, now.Add(HoldFor-settled))
	if err != nil {
		return nil, fmt.Errorf("held endpoints: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
