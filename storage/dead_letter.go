package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// DeadLetterFilter selects dead letters, for GET /v1/dead-letters and for
// replay jobs (whose params it is, as JSON). Zero fields match everything.
type DeadLetterFilter struct {
	EndpointID string     `json:"endpoint_id,omitempty"`
	EventType  string     `json:"event_type,omitempty"`
	Since      *time.Time `json:"since,omitempty"` // dead-lettered at or after
	Until      *time.Time `json:"until,omitempty"` // dead-lettered before
}

// deadLetterMatch is the WHERE clause of a DeadLetterFilter; its values are
// $1–$5, in the order of args.
const deadLetterMatch = `project_id = $1 AND ($2 = '' OR endpoint_id = $2) AND ($3 = '' OR event_type = $3)
	AND ($4::timestamptz IS NULL OR dead_lettered_at >= $4) AND ($5::timestamptz IS NULL OR dead_lettered_at < $5)`

func (f DeadLetterFilter) args(projectID string, more ...any) []any {
	return append([]any{projectID, f.EndpointID, f.EventType, f.Since, f.Until}, more...)
}

const deadLetterColumns = `id, project_id, delivery_id, event_id, endpoint_id, event_type, reason, last_status_code,
	dead_lettered_at, replayed_at, replayed_by`

func scanDeadLetter(row pgx.Row) (webhookd.DeadLetter, error) {
	var d webhookd.DeadLetter
	err := row.Scan(&d.ID, &d.ProjectID, &d.DeliveryID, &d.EventID, &d.EndpointID, &d.EventType, &d.Reason,
		&d.LastStatusCode, &d.DeadLetteredAt, &d.ReplayedAt, &d.ReplayedBy)
	return d, err
}

// ListDeadLetters returns a page of the project's dead letters matching f,
// replayed ones included, newest first, and whether more follow.
func (s *Store) ListDeadLetters(ctx context.Context, projectID string, f DeadLetterFilter, page Page) ([]webhookd.DeadLetter, bool, error) {
	rows, err := s.q.Query(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters
		WHERE `+deadLetterMatch+` AND ($6 = '' OR id < $6)
		ORDER BY id DESC LIMIT $7`, f.args(projectID, page.Cursor, page.Limit+1)...)
	if err != nil {
		return nil, false, fmt.Errorf("list dead letters: %w", err)
	}
	list, err := collect(rows, scanDeadLetter)
	if err != nil {
		return nil, false, fmt.Errorf("list dead letters: %w", err)
	}
	more := len(list) > page.Limit
	if more {
		list = list[:page.Limit]
	}
	return list, more, nil
}
