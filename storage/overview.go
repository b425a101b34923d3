package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MinuteCounts is what happened in one minute: attempts that got a 2xx,
// attempts that did not (an error status or no answer), and deliveries
// that became dead letters. Inspector attempts are not counted.
type MinuteCounts struct {
	Minute                          time.Time
	Succeeded, Failed, DeadLettered int
}

// Overview is the dashboard's chart: every minute of a window, oldest
// first, and the backlog now.
type Overview struct {
	Minutes []MinuteCounts
	// Due is how many deliveries wait for an attempt that is due now;
	// Scheduled how many wait for a later one. Counting stops at
	// BacklogCap: Capped says it did.
	Due, Scheduled int
	Capped         bool
}

// BacklogCap is where the overview stops counting the backlog, so that a
// huge one costs no more than this many index entries (and their heap
// pages: waiting deliveries change often, so the count is seldom
// index-only); 10,000 take about 30 ms.
const BacklogCap = 10_000

// minuteCountsSQL counts attempts by outcome and new dead letters in each
// minute of [$1, $2), every minute present (zeros where nothing happened).
// The ranges read attempts_started_idx and dead_letters_at_idx.
const minuteCountsSQL = `WITH m AS (
		SELECT generate_series($1::timestamptz, $2::timestamptz - interval '1 minute', interval '1 minute') AS minute
	), a AS (
		SELECT date_trunc('minute', started_at) AS minute,
			count(*) FILTER (WHERE status_code BETWEEN 200 AND 299) AS ok,
			count(*) FILTER (WHERE status_code IS NULL OR status_code NOT BETWEEN 200 AND 299) AS bad
		FROM attempts WHERE started_at >= $1 AND started_at < $2 AND trigger <> 'inspector' GROUP BY 1
	), l AS (
		SELECT date_trunc('minute', dead_lettered_at) AS minute, count(*) AS n
		FROM dead_letters WHERE dead_lettered_at >= $1 AND dead_lettered_at < $2 GROUP BY 1
	)
	SELECT m.minute, coalesce(a.ok, 0)::int, coalesce(a.bad, 0)::int, coalesce(l.n, 0)::int
	FROM m LEFT JOIN a USING (minute) LEFT JOIN l USING (minute)`

// Overview returns the minutes of the window before now and the backlog.
// Minutes older than settle (longer than an attempt can take to be
// recorded) come from the attempt_minutes rollup, which this call first
// brings up to date: each minute is counted once, from index ranges, and
// kept. The last few minutes are counted live from the same ranges. So a
// view reads about a day of rollup rows by key and a few minutes of
// attempts, never the whole table.
func (s *Store) Overview(ctx context.Context, now time.Time, window, settle time.Duration) (Overview, error) {
	var o Overview
	from := now.Add(-window).UTC().Truncate(time.Minute)
	settled := now.Add(-settle).UTC().Truncate(time.Minute)
	end := now.UTC().Truncate(time.Minute).Add(time.Minute) // the current minute, so far
	if err := s.rollUp(ctx, from, settled, window); err != nil {
		return o, err
	}
	rows, err := s.q.Query(ctx, `SELECT minute, succeeded, failed, dead_lettered FROM attempt_minutes
		WHERE minute >= $1 AND minute < $2 ORDER BY minute`, from, settled)
	if err != nil {
		return o, fmt.Errorf("overview: %w", err)
	}
	if o.Minutes, err = collect(rows, scanMinute); err != nil {
		return o, fmt.Errorf("overview: %w", err)
	}
	rows, err = s.q.Query(ctx, minuteCountsSQL, settled, end)
	if err != nil {
		return o, fmt.Errorf("overview: %w", err)
	}
	live, err := collect(rows, scanMinute)
	if err != nil {
		return o, fmt.Errorf("overview: %w", err)
	}
	o.Minutes = append(o.Minutes, live...)
	// deliveries_due_idx holds exactly the waiting deliveries: a count of
	// its entries, stopped at the cap.
	err = s.q.QueryRow(ctx, `SELECT count(*) FILTER (WHERE next_attempt_at <= $1), count(*) FROM (
			SELECT next_attempt_at FROM deliveries WHERE next_attempt_at IS NOT NULL LIMIT $2) w`,
		now, BacklogCap+1).Scan(&o.Due, &o.Scheduled)
	if err != nil {
		return o, fmt.Errorf("overview backlog: %w", err)
	}
	o.Capped = o.Scheduled > BacklogCap
	o.Scheduled -= o.Due
	return o, nil
}

func scanMinute(r pgx.Row) (MinuteCounts, error) {
	var m MinuteCounts
	err := r.Scan(&m.Minute, &m.Succeeded, &m.Failed, &m.DeadLettered)
	return m, err
}

// rollUp counts the minutes from the last one rolled up (or from) to
// until into attempt_minutes, and forgets minutes older than two windows.
// Two processes doing it at once count the same minutes the same way; the
// second's rows are dropped.
func (s *Store) rollUp(ctx context.Context, from, until time.Time, window time.Duration) error {
	var last *time.Time
	if err := s.q.QueryRow(ctx, `SELECT max(minute) FROM attempt_minutes`).Scan(&last); err != nil {
		return fmt.Errorf("overview rollup: %w", err)
	}
	start := from
	if last != nil && last.Add(time.Minute).After(start) {
		start = last.Add(time.Minute)
	}
	if !start.Before(until) {
		return nil
	}
	_, err := s.q.Exec(ctx, `WITH counted AS (`+minuteCountsSQL+`), kept AS (
			INSERT INTO attempt_minutes (minute, succeeded, failed, dead_lettered) SELECT * FROM counted
			ON CONFLICT (minute) DO NOTHING
		)
		DELETE FROM attempt_minutes WHERE minute < $3`, start, until, from.Add(-window))
	if err != nil {
		return fmt.Errorf("overview rollup: %w", err)
	}
	return nil
}

// ProjectOverview is Overview for one project, for its portal: its
// attempts and dead letters of the window counted live (the rollup counts
// every project together), joined to the project's deliveries, and its
// backlog.
func (s *Store) ProjectOverview(ctx context.Context, projectID string, now time.Time, window time.Duration) (Overview, error) {
	var o Overview
	from := now.Add(-window).UTC().Truncate(time.Minute)
	end := now.UTC().Truncate(time.Minute).Add(time.Minute)
	rows, err := s.q.Query(ctx, `WITH m AS (
			SELECT generate_series($1::timestamptz, $2::timestamptz - interval '1 minute', interval '1 minute') AS minute
		), a AS (
			SELECT date_trunc('minute', a.started_at) AS minute,
				count(*) FILTER (WHERE a.status_code BETWEEN 200 AND 299) AS ok,
				count(*) FILTER (WHERE a.status_code IS NULL OR a.status_code NOT BETWEEN 200 AND 299) AS bad
			FROM deliveries d JOIN attempts a ON a.delivery_id = d.id
			WHERE d.project_id = $3 AND d.id >= $4 AND a.started_at >= $1 AND a.started_at < $2
				AND a.trigger <> 'inspector' GROUP BY 1
		), l AS (
			SELECT date_trunc('minute', dead_lettered_at) AS minute, count(*) AS n
			FROM dead_letters WHERE project_id = $3 AND dead_lettered_at >= $1 AND dead_lettered_at < $2 GROUP BY 1
		)
		SELECT m.minute, coalesce(a.ok, 0)::int, coalesce(a.bad, 0)::int, coalesce(l.n, 0)::int
		FROM m LEFT JOIN a USING (minute) LEFT JOIN l USING (minute) ORDER BY m.minute`,
		from, end, projectID, prefixDelivery+idFloor(from.Add(-3*24*time.Hour)))
	if err != nil {
		return o, fmt.Errorf("project overview: %w", err)
	}
	if o.Minutes, err = collect(rows, scanMinute); err != nil {
		return o, fmt.Errorf("project overview: %w", err)
	}
	err = s.q.QueryRow(ctx, `SELECT count(*) FILTER (WHERE next_attempt_at <= $1), count(*) FROM (
			SELECT next_attempt_at FROM deliveries WHERE project_id = $3 AND next_attempt_at IS NOT NULL LIMIT $2) w`,
		now, BacklogCap+1, projectID).Scan(&o.Due, &o.Scheduled)
	if err != nil {
		return o, fmt.Errorf("project overview backlog: %w", err)
	}
	o.Capped = o.Scheduled > BacklogCap
	o.Scheduled -= o.Due
	return o, nil
}
