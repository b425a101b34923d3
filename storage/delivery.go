package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

const deliveryColumns = `d.id, d.project_id, d.event_id, d.endpoint_id, d.event_type, d.status, d.attempts_count,
	d.next_attempt_at, d.last_status_code, d.last_error, d.created_at, d.updated_at, coalesce(d.waiting_reason, '')`

func scanDelivery(row pgx.Row) (webhookd.Delivery, error) {
	var d webhookd.Delivery
	err := row.Scan(&d.ID, &d.ProjectID, &d.EventID, &d.EndpointID, &d.EventType, &d.Status, &d.AttemptsCount,
		&d.NextAttemptAt, &d.LastStatusCode, &d.LastError, &d.CreatedAt, &d.UpdatedAt, &d.WaitingReason)
	return d, err
}

// RequestRedelivery records that a manual attempt of the project's delivery
// was asked for by by, as request requestID, and returns the delivery. A
// request still pending is replaced: one attempt serves both. A delivery
// whose endpoint is disabled or deleted gets no request and returns
// endpoint_disabled.
func (s *Store) RequestRedelivery(ctx context.Context, projectID, id, requestID, by string) (webhookd.Delivery, error) {
	var active bool
	err := s.q.QueryRow(ctx, `SELECT p.status = 'active' AND p.deleted_at IS NULL FROM deliveries d
		JOIN endpoints p ON p.id = d.endpoint_id WHERE d.id = $1 AND d.project_id = $2`, id, projectID).Scan(&active)
	if err != nil {
		return webhookd.Delivery{}, translate(err, "delivery")
	}
	if !active {
		return webhookd.Delivery{}, &webhookd.Error{Code: webhookd.CodeEndpointDisabled,
			Message: "the delivery's endpoint is disabled: enable it (PATCH status active) before redelivering"}
	}
	d, err := scanDelivery(s.q.QueryRow(ctx, `UPDATE deliveries d SET manual_request_id = $3, manual_requested_by = $4
		WHERE d.id = $1 AND d.project_id = $2 RETURNING `+deliveryColumns, id, projectID, requestID, by))
	return d, translate(err, "delivery")
}

// Redelivery is a pending manual attempt.
type Redelivery struct {
	DeliveryID string
	EndpointID string
	RequestID  string
	By         string
}

// PendingRedeliveries returns up to limit redeliveries not yet attempted,
// after the delivery id after (for paging).
func (s *Store) PendingRedeliveries(ctx context.Context, after string, limit int) ([]Redelivery, error) {
	rows, err := s.q.Query(ctx, `SELECT id, endpoint_id, manual_request_id, manual_requested_by FROM deliveries
		WHERE manual_request_id IS NOT NULL AND id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("pending redeliveries: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Redelivery, error) {
		var m Redelivery
		err := r.Scan(&m.DeliveryID, &m.EndpointID, &m.RequestID, &m.By)
		return m, err
	})
}

// DueCursor is where a pass over due deliveries stands: the last one seen.
type DueCursor struct {
	At time.Time
	ID string
}

// DueDeliveries returns up to limit deliveries whose attempt is due at or
// before until and that no attempt holds at now, in order of due time
// after the cursor after (the zero cursor: from the longest overdue).
func (s *Store) DueDeliveries(ctx context.Context, until, now time.Time, after DueCursor, limit int) ([]webhookd.ScheduledDelivery, error) {
	rows, err := s.q.Query(ctx, `SELECT id, endpoint_id, next_attempt_at FROM deliveries
		WHERE next_attempt_at <= $1 AND (next_attempt_at, id) > ($3, $4)
			AND (lease_until IS NULL OR lease_until <= $2) AND waiting_reason IS DISTINCT FROM 'fifo_turn'
		ORDER BY next_attempt_at, id LIMIT $5`, until, now, after.At, after.ID, limit)
	if err != nil {
		return nil, fmt.Errorf("due deliveries: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhookd.ScheduledDelivery, error) {
		var d webhookd.ScheduledDelivery
		err := r.Scan(&d.ID, &d.EndpointID, &d.DueAt)
		return d, err
	})
}

// DeliveryFilter selects deliveries for GET /v1/deliveries.
type DeliveryFilter struct {
	Status     string
	EndpointID string
	EventType  string
	EventID    string
	Since      *time.Time
}

// ListDeliveries returns a page of the project's deliveries, newest first.
func (s *Store) ListDeliveries(ctx context.Context, projectID string, f DeliveryFilter, page Page) ([]webhookd.Delivery, bool, error) {
	rows, err := s.q.Query(ctx, `SELECT `+deliveryColumns+` FROM deliveries d
		WHERE d.project_id = $1 AND ($2 = '' OR d.status = $2) AND ($3 = '' OR d.endpoint_id = $3)
			AND ($4 = '' OR d.event_type = $4) AND ($5 = '' OR d.event_id = $5)
			AND ($6::timestamptz IS NULL OR d.created_at >= $6) AND ($7 = '' OR d.id < $7)
		ORDER BY d.id DESC LIMIT $8`,
		projectID, f.Status, f.EndpointID, f.EventType, f.EventID, f.Since, page.Cursor, page.Limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("list deliveries: %w", err)
	}
	list, err := collect(rows, scanDelivery)
	if err != nil {
		return nil, false, fmt.Errorf("list deliveries: %w", err)
	}
	more := len(list) > page.Limit
	if more {
		list = list[:page.Limit]
	}
	return list, more, nil
}

// GetDelivery returns one of the project's deliveries with its attempts,
// oldest first.
func (s *Store) GetDelivery(ctx context.Context, projectID, id string) (webhookd.Delivery, error) {
	d, err := scanDelivery(s.q.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM deliveries d
		WHERE d.id = $1 AND d.project_id = $2`, id, projectID))
	if err != nil {
		return d, translate(err, "delivery")
	}
	rows, err := s.q.Query(ctx, `SELECT delivery_id, number, request_id, url, trigger, status_code, error, duration_ms,
			started_at, request_headers, response_headers, response_body, coalesce(trace_id, '')
		FROM attempts WHERE delivery_id = $1 ORDER BY number, started_at`, id) // inspector attempts share numbers
	if err != nil {
		return d, fmt.Errorf("attempts: %w", err)
	}
	d.Attempts, err = collect(rows, func(r pgx.Row) (webhookd.Attempt, error) {
		var a webhookd.Attempt
		err := r.Scan(&a.DeliveryID, &a.Number, &a.RequestID, &a.URL, &a.Trigger, &a.StatusCode, &a.Error, &a.DurationMS,
			&a.StartedAt, &a.RequestHeaders, &a.ResponseHeaders, &a.ResponseBody, &a.TraceID)
		return a, err
	})
	if d.Attempts == nil {
		d.Attempts = []webhookd.Attempt{}
	}
	return d, err
}
