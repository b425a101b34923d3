package storage

import (
	"context"
	"fmt"
	"time"
)

// Purged counts what one retention pass removed.
type Purged struct {
	Deliveries         int64 // with their attempts and dead letters
	Events             int64 // left with no deliveries
	IdempotencyRecords int64
}

// Purge removes finished deliveries (with their attempts and dead letters)
// created before cutoff, events older than cutoff that have no delivery
// left, and idempotency records expired at now. Deliveries still waiting
// for an attempt, with a redelivery asked for and not yet made, or held by
// an attempt are kept whatever their age.
func (s *Store) Purge(ctx context.Context, cutoff, now time.Time) (Purged, error) {
	var p Purged
	tag, err := s.q.Exec(ctx, `DELETE FROM deliveries WHERE created_at < $1 AND next_attempt_at IS NULL
		AND manual_request_id IS NULL AND lease_owner IS NULL`, cutoff)
	if err != nil {
		return p, fmt.Errorf("purge deliveries: %w", err)
	}
	p.Deliveries = tag.RowsAffected()
	tag, err = s.q.Exec(ctx, `DELETE FROM events e WHERE e.created_at < $1
		AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id)`, cutoff)
	if err != nil {
		return p, fmt.Errorf("purge events: %w", err)
	}
	p.Events = tag.RowsAffected()
	p.IdempotencyRecords, err = s.PurgeIdempotencyRecords(ctx, now)
	return p, err
}
