package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// ErrLocked says another attempt holds the delivery right now.
var ErrLocked = errors.New("delivery is locked by another attempt")

const deliveryColumns = `d.id, d.project_id, d.event_id, d.endpoint_id, d.event_type, d.status, d.attempts_count,
	d.next_attempt_at, d.last_status_code, d.last_error, d.created_at, d.updated_at`

func scanDelivery(row pgx.Row) (webhookd.Delivery, error) {
	var d webhookd.Delivery
	err := row.Scan(&d.ID, &d.ProjectID, &d.EventID, &d.EndpointID, &d.EventType, &d.Status, &d.AttemptsCount,
		&d.NextAttemptAt, &d.LastStatusCode, &d.LastError, &d.CreatedAt, &d.UpdatedAt)
	return d, err
}

// LockedDelivery is a delivery held (SELECT ... FOR UPDATE) for one attempt,
// with its event and endpoint. Finish records the attempt and the new state
// in the same transaction; Release gives it up unchanged.
type LockedDelivery struct {
	tx              pgx.Tx
	Delivery        webhookd.Delivery
	Event           webhookd.Event
	Endpoint        webhookd.Endpoint
	EndpointDeleted bool
	Trigger         string  // what automatic attempts are logged as: auto or test
	ManualRequest   *string // the redelivery asked for and not yet made, if any
	ManualBy        *string // who asked for it
}

// LockDelivery begins the transaction of one attempt. With wait false, a
// delivery another attempt holds returns ErrLocked at once. An unknown id
// returns ErrNotFound.
func (db *DB) LockDelivery(ctx context.Context, id string, wait bool) (*LockedDelivery, error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	lock := "FOR UPDATE OF d"
	if !wait {
		lock += " SKIP LOCKED"
	}
	l := &LockedDelivery{tx: tx}
	var deleted *time.Time
	d, ep, ev := &l.Delivery, &l.Endpoint, &l.Event
	err = tx.QueryRow(ctx, `SELECT `+deliveryColumns+`,
			e.type, e.data, e.external_id, e.created_at,
			p.url, p.status, p.secret, p.previous_secret, p.previous_expires_at, p.rate_limit_per_second, p.deleted_at,
			d.trigger, d.manual_request_id, d.manual_requested_by
		FROM deliveries d JOIN events e ON e.id = d.event_id JOIN endpoints p ON p.id = d.endpoint_id
		WHERE d.id = $1 `+lock, id).Scan(
		&d.ID, &d.ProjectID, &d.EventID, &d.EndpointID, &d.EventType, &d.Status, &d.AttemptsCount,
		&d.NextAttemptAt, &d.LastStatusCode, &d.LastError, &d.CreatedAt, &d.UpdatedAt,
		&ev.Type, &ev.Data, &ev.ExternalID, &ev.CreatedAt,
		&ep.URL, &ep.Status, &ep.Secret, &ep.PreviousSecret, &ep.PreviousExpiresAt, &ep.RateLimitPerSecond, &deleted,
		&l.Trigger, &l.ManualRequest, &l.ManualBy)
	if errors.Is(err, pgx.ErrNoRows) {
		tx.Rollback(ctx)
		if !wait {
			var exists bool
			if err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM deliveries WHERE id = $1)`, id).Scan(&exists); err == nil && exists {
				return nil, ErrLocked
			}
		}
		return nil, &webhookd.Error{Code: webhookd.CodeNotFound, Message: "delivery not found"}
	}
	if err != nil {
		tx.Rollback(ctx)
		return nil, fmt.Errorf("lock delivery: %w", err)
	}
	ev.ID, ev.ProjectID = d.EventID, d.ProjectID
	ep.ID, ep.ProjectID = d.EndpointID, d.ProjectID
	l.EndpointDeleted = deleted != nil
	return l, nil
}

// Transition is the state a delivery moves to after an attempt (or without
// one, when its endpoint is disabled).
type Transition struct {
	Status           string     // the new delivery status
	NextAttemptAt    *time.Time // for pending and retrying
	DeadLetterReason string     // when Status is dead_letter
	DisableEndpoint  bool       // 410 Gone: disable with reason gone
	ReplayedBy       string     // who replayed, when a dead letter now succeeded
	// ManualDone clears the delivery's pending redelivery request: this
	// attempt was it.
	ManualDone bool
	Now        time.Time
}

// Finish records the attempt (nil for none) and moves the delivery in the
// transaction LockDelivery began, then commits. Its statements travel in one
// batch: one round trip before the commit.
func (l *LockedDelivery) Finish(ctx context.Context, a *webhookd.Attempt, t Transition) error {
	defer l.tx.Rollback(context.WithoutCancel(ctx))
	d := l.Delivery
	b := &pgx.Batch{}
	code, errText, count := d.LastStatusCode, d.LastError, d.AttemptsCount
	if a != nil {
		reqH, _ := json.Marshal(a.RequestHeaders)
		respH, _ := json.Marshal(a.ResponseHeaders)
		b.Queue(`INSERT INTO attempts (delivery_id, number, request_id, url, trigger, status_code, error,
				duration_ms, started_at, request_headers, response_headers, response_body)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			d.ID, a.Number, a.RequestID, a.URL, a.Trigger, a.StatusCode, a.Error, a.DurationMS, a.StartedAt,
			reqH, respH, a.ResponseBody)
		code, errText, count = a.StatusCode, a.Error, a.Number
	}
	b.Queue(`UPDATE deliveries SET status = $2, attempts_count = $3, next_attempt_at = $4,
			last_status_code = $5, last_error = $6, updated_at = $7,
			manual_request_id = CASE WHEN $8 THEN NULL ELSE manual_request_id END,
			manual_requested_by = CASE WHEN $8 THEN NULL ELSE manual_requested_by END
		WHERE id = $1`,
		d.ID, t.Status, count, t.NextAttemptAt, code, errText, t.Now, t.ManualDone)
	switch {
	case t.Status == webhookd.DeliveryDeadLetter && d.Status != webhookd.DeliveryDeadLetter:
		b.Queue(`INSERT INTO dead_letters (id, project_id, delivery_id, event_id, endpoint_id, event_type,
				reason, last_status_code, dead_lettered_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (delivery_id) DO UPDATE SET reason = EXCLUDED.reason, last_status_code = EXCLUDED.last_status_code,
				dead_lettered_at = EXCLUDED.dead_lettered_at, replayed_at = NULL, replayed_by = NULL`,
			newID(prefixDeadLetter), d.ProjectID, d.ID, d.EventID, d.EndpointID, d.EventType, t.DeadLetterReason, code, t.Now)
	case t.Status == webhookd.DeliveryDeadLetter:
		b.Queue(`UPDATE dead_letters SET last_status_code = $2 WHERE delivery_id = $1`, d.ID, code)
	case t.Status == webhookd.DeliverySucceeded && d.Status == webhookd.DeliveryDeadLetter:
		b.Queue(`UPDATE dead_letters SET replayed_at = $2, replayed_by = $3 WHERE delivery_id = $1`,
			d.ID, t.Now, t.ReplayedBy)
	}
	if t.DisableEndpoint {
		b.Queue(`UPDATE endpoints SET status = 'disabled', disabled_reason = 'gone',
			version = version + 1, updated_at = $2 WHERE id = $1 AND status = 'active'`, d.EndpointID, t.Now)
	}
	if err := l.tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record attempt of %s: %w", d.ID, err)
	}
	return l.tx.Commit(ctx)
}

// Release ends the attempt's transaction without a change.
func (l *LockedDelivery) Release(ctx context.Context) {
	l.tx.Rollback(context.WithoutCancel(ctx))
}

// RequestRedelivery records that a manual attempt of the project's delivery
// was asked for by by, as request requestID, and returns the delivery. A
// request still pending is replaced: one attempt serves both.
func (s *Store) RequestRedelivery(ctx context.Context, projectID, id, requestID, by string) (webhookd.Delivery, error) {
	d, err := scanDelivery(s.q.QueryRow(ctx, `UPDATE deliveries d SET manual_request_id = $3, manual_requested_by = $4
		WHERE d.id = $1 AND d.project_id = $2 RETURNING `+deliveryColumns, id, projectID, requestID, by))
	return d, translate(err, "delivery")
}

// Redelivery is a pending manual attempt.
type Redelivery struct {
	DeliveryID string
	RequestID  string
	By         string
}

// PendingRedeliveries returns up to limit redeliveries not yet attempted,
// after the delivery id after (for paging).
func (s *Store) PendingRedeliveries(ctx context.Context, after string, limit int) ([]Redelivery, error) {
	rows, err := s.q.Query(ctx, `SELECT id, manual_request_id, manual_requested_by FROM deliveries
		WHERE manual_request_id IS NOT NULL AND id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("pending redeliveries: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Redelivery, error) {
		var m Redelivery
		err := r.Scan(&m.DeliveryID, &m.RequestID, &m.By)
		return m, err
	})
}

// DueDeliveries returns up to limit deliveries whose attempt is due at or
// before until, the longest overdue first.
func (s *Store) DueDeliveries(ctx context.Context, until time.Time, limit int) ([]webhookd.ScheduledDelivery, error) {
	rows, err := s.q.Query(ctx, `SELECT id, next_attempt_at FROM deliveries
		WHERE next_attempt_at <= $1 ORDER BY next_attempt_at, id LIMIT $2`, until, limit)
	if err != nil {
		return nil, fmt.Errorf("due deliveries: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhookd.ScheduledDelivery, error) {
		var d webhookd.ScheduledDelivery
		err := r.Scan(&d.ID, &d.DueAt)
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
			started_at, request_headers, response_headers, response_body
		FROM attempts WHERE delivery_id = $1 ORDER BY number`, id)
	if err != nil {
		return d, fmt.Errorf("attempts: %w", err)
	}
	d.Attempts, err = collect(rows, func(r pgx.Row) (webhookd.Attempt, error) {
		var a webhookd.Attempt
		err := r.Scan(&a.DeliveryID, &a.Number, &a.RequestID, &a.URL, &a.Trigger, &a.StatusCode, &a.Error, &a.DurationMS,
			&a.StartedAt, &a.RequestHeaders, &a.ResponseHeaders, &a.ResponseBody)
		return a, err
	})
	if d.Attempts == nil {
		d.Attempts = []webhookd.Attempt{}
	}
	return d, err
}
