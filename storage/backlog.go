package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/webhookd/webhookd"
)

// Backlog is what is waiting, for the metrics an operator alerts on. Every
// number comes from an index: it is cheap enough to read at each scrape.
type Backlog struct {
	// OldestDue is, for each waiting status (pending, retrying), when the
	// longest-waiting delivery not held by an attempt became due; absent
	// when none is due.
	OldestDue map[string]time.Time
	// Jobs counts background jobs by status (queued, running), and
	// JobsRemaining the items those jobs have still to do (a bulk job's
	// refused lines are done with, as its accepted ones).
	Jobs          map[string]int
	JobsRemaining int
	// CircuitsOpen counts the endpoints whose circuit is not closed, and
	// OldestOpen is when the longest-open of them opened.
	CircuitsOpen int
	OldestOpen   *time.Time
}

// ReadBacklog reads the Backlog at now.
func (s *Store) ReadBacklog(ctx context.Context, now time.Time) (Backlog, error) {
	b := Backlog{OldestDue: map[string]time.Time{}, Jobs: map[string]int{}}
	// Each status walks deliveries_due_idx from its oldest entry and stops
	// at the first row of that status.
	rows, err := s.q.Query(ctx, `SELECT s.status, (SELECT d.next_attempt_at FROM deliveries d
			WHERE d.next_attempt_at <= $1 AND d.status = s.status AND (d.lease_until IS NULL OR d.lease_until <= $1)
			ORDER BY d.next_attempt_at LIMIT 1)
		FROM unnest($2::text[]) AS s(status)`,
		now, []string{webhookd.DeliveryPending, webhookd.DeliveryRetrying})
	if err != nil {
		return b, fmt.Errorf("oldest due delivery: %w", err)
	}
	for rows.Next() {
		var status string
		var at *time.Time
		if err := rows.Scan(&status, &at); err != nil {
			rows.Close()
			return b, fmt.Errorf("oldest due delivery: %w", err)
		}
		if at != nil {
			b.OldestDue[status] = *at
		}
	}
	if err := rows.Err(); err != nil {
		return b, fmt.Errorf("oldest due delivery: %w", err)
	}
	// jobs_runnable_idx covers exactly the queued and running jobs.
	rows, err = s.q.Query(ctx, `SELECT status, count(*), COALESCE(sum(total - done - CASE kind WHEN 'event_bulk' THEN failed_count ELSE 0 END), 0) FROM jobs
		WHERE status IN ('queued', 'running') GROUP BY status`)
	if err != nil {
		return b, fmt.Errorf("runnable jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var status string
		var n, remaining int
		if err := rows.Scan(&status, &n, &remaining); err != nil {
			return b, fmt.Errorf("runnable jobs: %w", err)
		}
		b.Jobs[status] = n
		b.JobsRemaining += remaining
	}
	if err := rows.Err(); err != nil {
		return b, fmt.Errorf("runnable jobs: %w", err)
	}
	// endpoints_circuit_idx holds exactly the endpoints whose circuit is open.
	if err := s.q.QueryRow(ctx, `SELECT count(*), min(circuit_opened_at) FROM endpoints WHERE circuit <> 'closed'`).
		Scan(&b.CircuitsOpen, &b.OldestOpen); err != nil {
		return b, fmt.Errorf("open circuits: %w", err)
	}
	return b, nil
}
