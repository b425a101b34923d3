package storage

import (
	"context"
	"fmt"
	"time"
)

// DefaultPurgeBatch is how many rows one statement of a purge deletes at
// most.
const DefaultPurgeBatch = 1000

// Purged counts what one retention pass removed.
type Purged struct {
	Days               int64 // days of partitions dropped whole (Retention)
	Deliveries         int64 // with their attempts and dead letters
	Events             int64 // left with no deliveries
	IdempotencyRecords int64
}

// Purge removes, from outside every day (the default partitions: rows
// whose day was never made), finished deliveries (with their attempts and
// dead letters) created before cutoff, events older than cutoff that have
// no delivery left, and idempotency records expired at now. A day's rows
// go only with their day, whole (DropDay): a day kept for a delivery that
// waits keeps all of them meanwhile (SPEC §4: never row by row). Deliveries
// still waiting for an attempt, with a redelivery asked for and not yet
// made, or held by an attempt are kept whatever their age.
//
// It deletes in statements of at most batch rows (DefaultPurgeBatch when
// 0 or less), each its own short transaction, oldest first, until a
// statement finds fewer: a large backlog never holds long locks or one
// huge transaction. When ctx ends it stops between statements and returns
// what it removed so far with ctx's error.
func (s *Store) Purge(ctx context.Context, cutoff, now time.Time, batch int) (Purged, error) {
	if batch <= 0 {
		batch = DefaultPurgeBatch
	}
	var p Purged
	var err error
	// The conditions are repeated outside the subquery so that a delivery
	// leased or redelivered meanwhile is rechecked on its new row and kept.
	// A delivery's attempts and dead letter go with it (neither keeps a
	// foreign key, migrations 7 and 25: its
	// check on every recorded attempt cost more than the attempt's own
	// write). A delivery is purged only while no lease is on it, so no
	// attempt of it can be recorded meanwhile. Every statement names the
	// default partitions: a delivery's id carries its event's time and its
	// attempts and dead letter are keyed by it, so the rows of a delivery in
	// deliveries_default are all in the default partitions — and, through
	// the parents, PostgreSQL 15 would lock every day's partitions.
	if p.Deliveries, err = s.purgeBatches(ctx, "deliveries", `WITH gone AS (
			DELETE FROM deliveries_default WHERE id IN (
				SELECT id FROM deliveries_default WHERE created_at < $1 AND next_attempt_at IS NULL
					AND manual_request_id IS NULL AND lease_owner IS NULL
				ORDER BY created_at LIMIT $2)
			AND next_attempt_at IS NULL AND manual_request_id IS NULL AND lease_owner IS NULL
			RETURNING id
		), attempts_gone AS (
			DELETE FROM attempts_default WHERE delivery_id IN (SELECT id FROM gone)
		), dead_letters_gone AS (
			DELETE FROM dead_letters_default WHERE delivery_id IN (SELECT id FROM gone)
		)
		SELECT count(*) FROM gone`, cutoff, batch); err != nil {
		return p, err
	}
	// New deliveries are only ever made with a new event, so an old event
	// with none left keeps none.
	if p.Events, err = s.purgeBatches(ctx, "events", `WITH gone AS (
			DELETE FROM events_default WHERE id IN (
				SELECT e.id FROM events_default e WHERE e.created_at < $1
					AND NOT EXISTS (SELECT 1 FROM deliveries_default d WHERE d.event_id = e.id)
				ORDER BY e.created_at LIMIT $2)
			RETURNING id, external_id
		), external_ids_gone AS (
			DELETE FROM event_external_ids WHERE event_id IN (SELECT id FROM gone WHERE external_id IS NOT NULL)
		) SELECT count(*) FROM gone`, cutoff, batch); err != nil {
		return p, err
	}
	p.IdempotencyRecords, err = s.purgeBatches(ctx, "idempotency records", `WITH gone AS (
			DELETE FROM idempotency_records
			WHERE (project_id, key) IN (SELECT project_id, key FROM idempotency_records WHERE expires_at <= $1
				ORDER BY expires_at LIMIT $2)
			AND expires_at <= $1
			RETURNING 1
		) SELECT count(*) FROM gone`, now, batch)
	return p, err
}

// purgeBatches runs query (a DELETE of at most $2 rows selected by $1,
// answering how many it deleted) until it deletes fewer than batch rows,
// and returns how many went.
func (s *Store) purgeBatches(ctx context.Context, what, query string, before time.Time, batch int) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int64
		if err := s.q.QueryRow(ctx, query, before, batch).Scan(&n); err != nil {
			return total, fmt.Errorf("purge %s: %w", what, err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}
