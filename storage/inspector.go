package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// The inspector: request bins served by webhookd itself, what they
// received, and the attempts "Send to inspector" makes.

// InspectorSendBin is the bin "Send to inspector" delivers to (made by the
// migration).
const InspectorSendBin = "bin_inspector"

const (
	prefixBin              = "bin_"
	prefixInspectorRequest = "ir_"
)

// InspectorBin is a request bin: a URL on the dashboard listener that keeps
// what is posted to it.
type InspectorBin struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// InspectorRequest is one request a bin received, as it arrived.
type InspectorRequest struct {
	ID         string
	BinID      string
	Method     string
	Path       string
	RemoteAddr string
	Headers    map[string][]string
	Body       []byte
	ReceivedAt time.Time
}

// CreateInspectorBin makes a bin called name (1–128 characters).
func (s *Store) CreateInspectorBin(ctx context.Context, name string, now time.Time) (InspectorBin, error) {
	b := InspectorBin{ID: newID(prefixBin), Name: name, CreatedAt: now}
	_, err := s.q.Exec(ctx, `INSERT INTO inspector_bins (id, name, created_at) VALUES ($1, $2, $3)`, b.ID, name, now)
	if err != nil {
		return InspectorBin{}, fmt.Errorf("create inspector bin: %w", err)
	}
	return b, nil
}

// InspectorBins returns the bins, newest first (at most 200), the one
// "Send to inspector" uses first of all.
func (s *Store) InspectorBins(ctx context.Context) ([]InspectorBin, error) {
	rows, err := s.q.Query(ctx, `SELECT id, name, created_at FROM inspector_bins
		ORDER BY id = $1 DESC, id DESC LIMIT 200`, InspectorSendBin)
	if err != nil {
		return nil, fmt.Errorf("inspector bins: %w", err)
	}
	return collect(rows, scanBin)
}

// InspectorBinByID returns one bin, or not_found.
func (s *Store) InspectorBinByID(ctx context.Context, id string) (InspectorBin, error) {
	b, err := scanBin(s.q.QueryRow(ctx, `SELECT id, name, created_at FROM inspector_bins WHERE id = $1`, id))
	return b, translate(err, "inspector bin")
}

func scanBin(r pgx.Row) (InspectorBin, error) {
	var b InspectorBin
	err := r.Scan(&b.ID, &b.Name, &b.CreatedAt)
	return b, err
}

// CaptureInspectorRequest keeps r in its bin and drops the bin's requests
// beyond its newest keep, in one statement; it returns the new request's
// id, or not_found when the bin does not exist.
func (s *Store) CaptureInspectorRequest(ctx context.Context, r InspectorRequest, keep int) (string, error) {
	id := newID(prefixInspectorRequest)
	var got string
	err := s.q.QueryRow(ctx, `WITH ins AS (
			INSERT INTO inspector_requests (id, bin_id, method, path, remote_addr, headers, body, received_at)
			SELECT $1, b.id, $3, $4, $5, $6, $7, $8 FROM inspector_bins b WHERE b.id = $2
			RETURNING id
		), trim AS (
			DELETE FROM inspector_requests WHERE bin_id = $2 AND id IN (
				SELECT id FROM inspector_requests WHERE bin_id = $2 ORDER BY id DESC OFFSET $9)
		)
		SELECT id FROM ins`, id, r.BinID, r.Method, r.Path, r.RemoteAddr, r.Headers, r.Body, r.ReceivedAt,
		keep-1).Scan(&got)
	return got, translate(err, "inspector bin")
}

const inspectorRequestColumns = `id, bin_id, method, path, remote_addr, headers, body, received_at`

func scanInspectorRequest(r pgx.Row) (InspectorRequest, error) {
	var q InspectorRequest
	err := r.Scan(&q.ID, &q.BinID, &q.Method, &q.Path, &q.RemoteAddr, &q.Headers, &q.Body, &q.ReceivedAt)
	return q, err
}

// InspectorRequests returns a bin's newest requests, at most limit.
func (s *Store) InspectorRequests(ctx context.Context, binID string, limit int) ([]InspectorRequest, error) {
	rows, err := s.q.Query(ctx, `SELECT `+inspectorRequestColumns+` FROM inspector_requests
		WHERE bin_id = $1 ORDER BY id DESC LIMIT $2`, binID, limit)
	if err != nil {
		return nil, fmt.Errorf("inspector requests: %w", err)
	}
	return collect(rows, scanInspectorRequest)
}

// InspectorRequestByID returns one received request, or not_found.
func (s *Store) InspectorRequestByID(ctx context.Context, id string) (InspectorRequest, error) {
	q, err := scanInspectorRequest(s.q.QueryRow(ctx, `SELECT `+inspectorRequestColumns+`
		FROM inspector_requests WHERE id = $1`, id))
	return q, translate(err, "inspector request")
}

// AttemptSigner is who signed an attempt: its delivery and trigger, and
// the endpoint's secrets as they are now.
type AttemptSigner struct {
	DeliveryID        string
	Trigger           string
	EndpointID        string
	Secret            string
	PreviousSecret    *string
	PreviousExpiresAt *time.Time
}

// AttemptSignerByRequestID returns the signer of the attempt logged with
// request id requestID (the X-Request-Id it carried), or not_found while
// no attempt is logged with it.
func (s *Store) AttemptSignerByRequestID(ctx context.Context, requestID string) (AttemptSigner, error) {
	var a AttemptSigner
	err := s.q.QueryRow(ctx, `SELECT a.delivery_id, a.trigger, p.id, p.secret, p.previous_secret, p.previous_expires_at
		FROM attempts a JOIN deliveries d ON d.id = a.delivery_id JOIN endpoints p ON p.id = d.endpoint_id
		WHERE a.request_id = $1`, requestID).Scan(&a.DeliveryID, &a.Trigger, &a.EndpointID, &a.Secret,
		&a.PreviousSecret, &a.PreviousExpiresAt)
	return a, translate(err, "attempt")
}

// InspectionLease reads a delivery with its event and endpoint, as
// ClaimDeliveries would, but leases nothing: for an attempt that never
// changes the delivery (the inspector's). Held is false; Token is empty.
// A delivery that does not exist is not_found.
func (db *DB) InspectionLease(ctx context.Context, deliveryID string) (Lease, error) {
	var l Lease
	var deleted *time.Time
	d, ev, ep := &l.Delivery, &l.Event, &l.Endpoint
	err := db.pool.QueryRow(ctx, `SELECT `+deliveryColumns+`, d.auto_attempts,
			e.type, e.data, e.external_id, e.created_at,
			p.url, p.status, p.secret, p.previous_secret, p.previous_expires_at, p.rate_limit_per_second, p.deleted_at,
			d.trigger, p.transformation
		FROM deliveries d JOIN events e ON e.id = d.event_id JOIN endpoints p ON p.id = d.endpoint_id
		WHERE d.id = $1`, deliveryID).Scan(&d.ID, &d.ProjectID, &d.EventID, &d.EndpointID, &d.EventType, &d.Status,
		&d.AttemptsCount, &d.NextAttemptAt, &d.LastStatusCode, &d.LastError, &d.CreatedAt, &d.UpdatedAt, &d.WaitingReason,
		&l.AutoAttempts, &ev.Type, &ev.Data, &ev.ExternalID, &ev.CreatedAt,
		&ep.URL, &ep.Status, &ep.Secret, &ep.PreviousSecret, &ep.PreviousExpiresAt, &ep.RateLimitPerSecond, &deleted,
		&l.Trigger, &ep.Transformation)
	if err != nil {
		return Lease{}, translate(err, "delivery")
	}
	l.Found = true
	ev.ID, ev.ProjectID = d.EventID, d.ProjectID
	ep.ID, ep.ProjectID = d.EndpointID, d.ProjectID
	l.EndpointDeleted = deleted != nil
	return l, nil
}

// RecordInspectorAttempt logs a, an attempt with trigger inspector, and
// changes nothing else: not the delivery's status, schedule or counts.
func (db *DB) RecordInspectorAttempt(ctx context.Context, a webhookd.Attempt) error {
	if a.Trigger != webhookd.TriggerInspector {
		return fmt.Errorf("record inspector attempt: trigger is %q, not inspector", a.Trigger)
	}
	if a.RequestHeaders == nil {
		a.RequestHeaders = map[string]string{}
	}
	if a.ResponseHeaders == nil {
		a.ResponseHeaders = map[string]string{}
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO attempts (delivery_id, number, request_id, url, trigger, status_code,
			error, duration_ms, started_at, request_headers, response_headers, response_body)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		a.DeliveryID, a.Number, a.RequestID, a.URL, a.Trigger, a.StatusCode, a.Error, a.DurationMS, a.StartedAt,
		a.RequestHeaders, a.ResponseHeaders, a.ResponseBody)
	if err != nil {
		return fmt.Errorf("record inspector attempt of %s: %w", a.DeliveryID, err)
	}
	return nil
}
