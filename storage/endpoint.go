package storage

import (
	"cmp"
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// SecretOverlap is how long a rotated-out secret keeps signing.
const SecretOverlap = 24 * time.Hour

const endpointColumns = `id, project_id, url, description, event_types, status, disabled_reason,
	rate_limit_per_second, secret, previous_secret, previous_expires_at, version, created_at, updated_at, max_in_flight,
	circuit, probe_at, ordering, filter, transformation`

// scanEndpoint reads an endpoint of endpointColumns, its secrets opened.
// more are the columns after them, if any.
func (s *Store) scanEndpoint(row pgx.Row, more ...any) (webhookd.Endpoint, error) {
	var e webhookd.Endpoint
	err := row.Scan(append([]any{&e.ID, &e.ProjectID, &e.URL, &e.Description, &e.EventTypes, &e.Status, &e.DisabledReason,
		&e.RateLimitPerSecond, &e.Secret, &e.PreviousSecret, &e.PreviousExpiresAt, &e.Version, &e.CreatedAt, &e.UpdatedAt,
		&e.MaxInFlight, &e.Circuit, &e.ProbeAt, &e.Ordering, &e.Filter, &e.Transformation}, more...)...)
	if e.EventTypes == nil {
		e.EventTypes = []string{}
	}
	if err == nil {
		err = s.box.openSecrets(&e.Secret, &e.PreviousSecret)
	}
	return e, err
}

// NewEndpoint is a validated endpoint to create.
type NewEndpoint struct {
	URL                string
	Description        string
	EventTypes         []string
	RateLimitPerSecond *int
	MaxInFlight        *int
	Ordering           string          // "": webhookd.OrderingNone
	Filter             json.RawMessage // checked (filter.Compile); nil: none
	Transformation     *string         // checked (transform.Engine.Check); nil: none
	Secret             string
}

// CreateEndpoint stores a new active endpoint with version 1.
func (s *Store) CreateEndpoint(ctx context.Context, projectID string, n NewEndpoint, now time.Time) (webhookd.Endpoint, error) {
	if n.EventTypes == nil {
		n.EventTypes = []string{}
	}
	row := s.q.QueryRow(ctx, `
		INSERT INTO endpoints (id, project_id, url, description, event_types, rate_limit_per_second, secret, created_at, updated_at,
			max_in_flight, ordering, filter, transformation)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, COALESCE($9::int, $10::int), $11, $12, $13)
		RETURNING `+endpointColumns,
		newID(prefixEndpoint), projectID, n.URL, n.Description, n.EventTypes, n.RateLimitPerSecond, s.box.sealString(n.Secret), now, n.MaxInFlight,
		webhookd.DefaultMaxInFlight, cmp.Or(n.Ordering, webhookd.OrderingNone), filterArg(n.Filter), n.Transformation)
	e, err := s.scanEndpoint(row)
	return e, translate(err, "endpoint")
}

// GetEndpoint returns a live endpoint of the project, or ErrNotFound.
func (s *Store) GetEndpoint(ctx context.Context, projectID, id string) (webhookd.Endpoint, error) {
	row := s.q.QueryRow(ctx, `SELECT `+endpointColumns+` FROM endpoints
		WHERE id = $1 AND project_id = $2 AND deleted_at IS NULL`, id, projectID)
	e, err := s.scanEndpoint(row)
	return e, translate(err, "endpoint")
}

// Page asks for one page of a list, newest first.
type Page struct {
	Limit  int    // 1–100
	Cursor string // the id to continue after ("" for the first page)
}

// ListEndpoints returns up to page.Limit live endpoints, newest first, and
// whether more follow.
func (s *Store) ListEndpoints(ctx context.Context, projectID string, page Page) ([]webhookd.Endpoint, bool, error) {
	rows, err := s.q.Query(ctx, `SELECT `+endpointColumns+` FROM endpoints
		WHERE project_id = $1 AND deleted_at IS NULL AND ($2 = '' OR id < $2)
		ORDER BY id DESC LIMIT $3`, projectID, page.Cursor, page.Limit+1)
	if err != nil {
		return nil, false, translate(err, "list endpoints")
	}
	list, err := collect(rows, func(r pgx.Row) (webhookd.Endpoint, error) { return s.scanEndpoint(r) })
	if err != nil {
		return nil, false, translate(err, "list endpoints")
	}
	more := len(list) > page.Limit
	if more {
		list = list[:page.Limit]
	}
	return list, more, nil
}

// EndpointPatch holds the fields a PATCH changes; nil leaves one alone.
type EndpointPatch struct {
	URL                *string
	Description        *string
	EventTypes         *[]string
	RateLimitPerSecond **int // non-nil pointer to nil: clear the limit
	MaxInFlight        **int // non-nil pointer to nil: webhookd.DefaultMaxInFlight
	// Ordering applies to the deliveries of events accepted from then on:
	// those accepted before keep the order (or none) they were made with.
	Ordering *string
	// Filter replaces the filter; a pointer to nil removes it.
	Filter *json.RawMessage
	// Transformation replaces the transformation; a pointer to nil
	// removes it.
	Transformation **string
	// ReplayDeadLetters, with Status active for a disabled endpoint,
	// replays its dead letters of the outage in one job
	// (UpdateEndpointAndReplay).
	ReplayDeadLetters bool
	Status            *string
	IfVersion         *int // when set, the change applies only at this version
}

// UpdateEndpoint applies p and bumps the version; enabling a disabled
// endpoint also closes its circuit and ends its failing spell, so that it
// starts as a new one. A stale IfVersion returns
// ErrVersionMismatch; an unknown id ErrNotFound.
func (s *Store) UpdateEndpoint(ctx context.Context, projectID, id string, p EndpointPatch, now time.Time) (webhookd.Endpoint, error) {
	e, _, err := s.UpdateEndpointAndReplay(ctx, projectID, id, p, now)
	return e, err
}

// UpdateEndpointAndReplay is UpdateEndpoint, and with p.ReplayDeadLetters
// it creates, in the same transaction, a queued dead-letter replay job
// over the endpoint's dead letters of its outage: those dead-lettered
// since its first failure after its last success (failing_since), or, if
// it was not failing, since its last change (its disabling). It is
// validation_failed (replay_dead_letters) unless the patch enables a
// disabled endpoint.
func (s *Store) UpdateEndpointAndReplay(ctx context.Context, projectID, id string, p EndpointPatch, now time.Time) (webhookd.Endpoint, *webhookd.Job, error) {
	var (
		out webhookd.Endpoint
		job *webhookd.Job
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var outage time.Time
		cur, err := s.scanEndpoint(tx.QueryRow(ctx, `SELECT `+endpointColumns+`, COALESCE(failing_since, updated_at) FROM endpoints
			WHERE id = $1 AND project_id = $2 AND deleted_at IS NULL FOR UPDATE`, id, projectID), &outage)
		if err != nil {
			return err
		}
		if p.ReplayDeadLetters {
			if cur.Status != webhookd.EndpointDisabled || p.Status == nil || *p.Status != webhookd.EndpointActive {
				return webhookd.Invalid("replay_dead_letters",
					`replays an outage's dead letters only when the same request enables a disabled endpoint ("status":"active")`)
			}
			ts := &Store{q: tx, tx: tx, db: s.db, box: s.box}
			j, err := ts.CreateJob(ctx, projectID, DeadLetterFilter{EndpointID: id, Since: &outage}, now)
			if err != nil {
				return err
			}
			job = &j
		}
		if p.IfVersion != nil && *p.IfVersion != cur.Version {
			return &webhookd.Error{Code: webhookd.CodeVersionMismatch,
				Message: "endpoint is at a different version; read it again and retry"}
		}
		if p.URL != nil {
			cur.URL = *p.URL
		}
		if p.Description != nil {
			cur.Description = *p.Description
		}
		if p.EventTypes != nil {
			cur.EventTypes = *p.EventTypes
			if cur.EventTypes == nil { // null: every type, stored as the empty list
				cur.EventTypes = []string{}
			}
		}
		if p.RateLimitPerSecond != nil {
			cur.RateLimitPerSecond = *p.RateLimitPerSecond
		}
		if p.MaxInFlight != nil {
			cur.MaxInFlight = *p.MaxInFlight
			if cur.MaxInFlight == nil { // null: the default again
				def := webhookd.DefaultMaxInFlight
				cur.MaxInFlight = &def
			}
		}
		if p.Ordering != nil {
			cur.Ordering = *p.Ordering
		}
		if p.Filter != nil {
			cur.Filter = *p.Filter
		}
		if p.Transformation != nil {
			cur.Transformation = *p.Transformation
		}
		// Enabled by a person, an endpoint starts afresh: the failing spell
		// and the open circuit of before would disable it again at its
		// first failure and hold its deliveries for a probe.
		enable := cur.Status == webhookd.EndpointDisabled && p.Status != nil && *p.Status == webhookd.EndpointActive
		if p.Status != nil && *p.Status != cur.Status {
			cur.Status = *p.Status
			cur.DisabledReason = nil
			if cur.Status == webhookd.EndpointDisabled {
				reason := webhookd.DisabledManual
				cur.DisabledReason = &reason
			}
		}
		out, err = s.scanEndpoint(tx.QueryRow(ctx, `
			UPDATE endpoints SET url = $3, description = $4, event_types = $5, rate_limit_per_second = $6,
				status = $7, disabled_reason = $8, version = version + 1, updated_at = $9, max_in_flight = $10,
				ordering = $11, filter = $13, transformation = $14`+closeCircuitIf12+`
			WHERE id = $1 AND project_id = $2
			RETURNING `+endpointColumns,
			id, projectID, cur.URL, cur.Description, cur.EventTypes, cur.RateLimitPerSecond,
			cur.Status, cur.DisabledReason, now, cur.MaxInFlight, cur.Ordering, enable, filterArg(cur.Filter), cur.Transformation))
		return err
	})
	return out, job, translate(err, "endpoint")
}

// filterArg is a filter as its column's argument: NULL for none.
func filterArg(f json.RawMessage) any {
	if len(f) == 0 || string(f) == "null" {
		return nil
	}
	return string(f)
}

// closeCircuitIf12 is the SET list that, when $12 is true, closes the
// endpoint's circuit and ends its failing spell (the state of a new one).
const closeCircuitIf12 = `,
	circuit = CASE WHEN $12 THEN 'closed' ELSE circuit END, failures = CASE WHEN $12 THEN 0 ELSE failures END,
	failing_since = CASE WHEN $12 THEN NULL ELSE failing_since END, probes = CASE WHEN $12 THEN 0 ELSE probes END,
	probe_at = CASE WHEN $12 THEN NULL ELSE probe_at END, probe_worker = CASE WHEN $12 THEN NULL ELSE probe_worker END,
	circuit_opened_at = CASE WHEN $12 THEN NULL ELSE circuit_opened_at END`

// DeleteEndpoint removes an endpoint from the API. Its history stays for the
// dashboard; deliveries still scheduled for it become endpoint_disabled dead
// letters when their turn comes.
func (s *Store) DeleteEndpoint(ctx context.Context, projectID, id string, now time.Time) error {
	tag, err := s.q.Exec(ctx, `UPDATE endpoints SET deleted_at = $3, status = 'disabled',
		disabled_reason = COALESCE(disabled_reason, 'manual'), updated_at = $3
		WHERE id = $1 AND project_id = $2 AND deleted_at IS NULL`, id, projectID, now)
	if err != nil {
		return translate(err, "endpoint")
	}
	if tag.RowsAffected() == 0 {
		return &webhookd.Error{Code: webhookd.CodeNotFound, Message: "endpoint not found"}
	}
	return nil
}

// RotateSecret makes secret the endpoint's current secret; the old one keeps
// signing for SecretOverlap.
func (s *Store) RotateSecret(ctx context.Context, projectID, id, secret string, now time.Time) (webhookd.Endpoint, error) {
	row := s.q.QueryRow(ctx, `
		UPDATE endpoints SET previous_secret = secret, previous_expires_at = $4, secret = $3, updated_at = $5
		WHERE id = $1 AND project_id = $2 AND deleted_at IS NULL
		RETURNING `+endpointColumns, id, projectID, s.box.sealString(secret), now.Add(SecretOverlap), now)
	e, err := s.scanEndpoint(row)
	return e, translate(err, "endpoint")
}

// collect scans every row with scan.
func collect[T any](rows pgx.Rows, scan func(pgx.Row) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
