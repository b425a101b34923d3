package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// WorkerStale is how long a worker process may go without a heartbeat
// before its leases are void (SPEC §1: 5 s).
const WorkerStale = 5 * time.Second

// EndpointLoad is one endpoint's adaptive limit and its requests in
// flight, in one worker or summed over the live ones; Holding counts the
// workers that hold deliveries of it back for room and wake them as its
// slots free (1 or 0 in one worker's beat).
type EndpointLoad struct {
	Limit    int
	InFlight int
	Holding  int
}

// beatTimeout bounds one beat: well below WorkerStale, so that a beat
// stuck on a broken connection gives way to the next one, on a new
// connection, before this worker is judged dead.
const beatTimeout = 2 * time.Second

// Beat records that worker id is alive, with its endpoints' loads. Times
// are PostgreSQL's own, so that every process judges staleness by one
// clock. It runs on a connection of its own (DB.heart), never waiting for
// the shared pool, and gives up after beatTimeout.
func (db *DB) Beat(ctx context.Context, id string, loads map[string]EndpointLoad) error {
	enc := make(map[string][3]int, len(loads))
	for ep, l := range loads {
		enc[ep] = [3]int{l.Limit, l.InFlight, l.Holding}
	}
	b, err := json.Marshal(enc)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, beatTimeout)
	defer cancel()
	_, err = db.heart.Exec(ctx, `INSERT INTO workers (id, started_at, beat_at, limits) VALUES ($1, now(), now(), $2)
		ON CONFLICT (id) DO UPDATE SET beat_at = now(), limits = EXCLUDED.limits`, id, b)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// Retire removes worker id, after its attempts were recorded: a clean
// stop, whose leases are all given up already.
func (db *DB) Retire(ctx context.Context, id string) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM workers WHERE id = $1`, id); err != nil {
		return fmt.Errorf("retire worker: %w", err)
	}
	return nil
}

// VoidedLease is a delivery whose lease a dead worker held: its task ids
// (the delivery's, and its redelivery request's if one is pending) may be
// stuck with that worker in the queue.
type VoidedLease struct {
	DeliveryID    string
	EndpointID    string
	ManualRequest *string
}

// VoidDeadLeases frees the leases held by workers that have not beaten for
// WorkerStale, and forgets those workers. A freed delivery is due again
// (the next claim takes it); the dead worker's record, should it come
// back, still needs its own lease token, so it applies only while nobody
// else has claimed the delivery. Only unfinished deliveries and pending
// redeliveries are looked at (their partial indexes), so this costs little
// however many finished deliveries are kept.
//
// It also tells how many workers it found dead, leases or not.
func (db *DB) VoidDeadLeases(ctx context.Context) ([]VoidedLease, int, error) {
	var (
		out  []VoidedLease
		dead []string
	)
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM workers WHERE beat_at < now() - make_interval(secs => $1) RETURNING id`,
			WorkerStale.Seconds())
		if err != nil {
			return err
		}
		if dead, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(dead) == 0 {
			return err
		}
		// The lease keeps its owner (so that owner's record still applies
		// while nobody else has claimed the delivery) and ends long ago.
		rows, err = tx.Query(ctx, `UPDATE deliveries SET lease_until = 'epoch'
			WHERE (next_attempt_at IS NOT NULL OR manual_request_id IS NOT NULL)
				AND lease_owner IS NOT NULL AND lease_until > 'epoch' AND lease_worker = ANY($1)
			RETURNING id, endpoint_id, manual_request_id`, dead)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (VoidedLease, error) {
			var v VoidedLease
			err := r.Scan(&v.DeliveryID, &v.EndpointID, &v.ManualRequest)
			return v, err
		})
		if err != nil {
			return err
		}
		// A probe the dead worker had taken will never be counted: the next
		// may go now, rather than when the dead one's time runs out.
		_, err = tx.Exec(ctx, `UPDATE endpoints SET circuit = 'open', probe_at = now(), probe_worker = NULL
			WHERE circuit = 'probing' AND probe_worker = ANY($1)`, dead)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("void dead leases: %w", err)
	}
	return out, len(dead), nil
}

// EndpointLoads sums, per endpoint of ids, the limits and requests in
// flight that live workers reported in their last heartbeat. An endpoint
// no live worker delivered to lately is missing.
func (s *Store) EndpointLoads(ctx context.Context, ids []string) (map[string]EndpointLoad, error) {
	rows, err := s.q.Query(ctx, `SELECT l.key, sum((l.value->>0)::int), sum((l.value->>1)::int),
			sum(coalesce((l.value->>2)::int, 0))
		FROM workers w, jsonb_each(w.limits) AS l
		WHERE w.beat_at >= now() - make_interval(secs => $2) AND l.key = ANY($1)
		GROUP BY l.key`, ids, WorkerStale.Seconds())
	if err != nil {
		return nil, fmt.Errorf("endpoint loads: %w", err)
	}
	out := map[string]EndpointLoad{}
	var (
		ep string
		l  EndpointLoad
	)
	_, err = pgx.ForEachRow(rows, []any{&ep, &l.Limit, &l.InFlight, &l.Holding}, func() error { out[ep] = l; return nil })
	if err != nil {
		return nil, fmt.Errorf("endpoint loads: %w", err)
	}
	return out, nil
}
