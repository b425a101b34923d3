package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/webhookd/webhookd"
)

// The dashboard's reads: unlike the API's, they look across every project,
// since the dashboard's admin sees them all.

// DashboardFilter selects deliveries for the dashboard. Empty fields do not
// filter; Since is required.
type DashboardFilter struct {
	Status     string
	ProjectID  string
	EndpointID string
	EventType  string
	EventID    string
	DeliveryID string
	Since      time.Time // only deliveries created at or after it
}

// DeliveryRow is a delivery as the dashboard lists it: with the name of its
// project and the URL of its endpoint.
type DeliveryRow struct {
	webhookd.Delivery
	ProjectName string
	EndpointURL string
}

// DashboardDeliveries returns a page of deliveries of every project matching
// f, newest first (by id, whose ULID sorts by creation time), continuing
// after page.Cursor, and whether more follow. The WHERE clause names only
// the filters given, so each combination gets a plan that uses its index
// ((project_id, status, id), (endpoint_id, id), (event_id), or the primary
// key) instead of one generic plan for all.
func (s *Store) DashboardDeliveries(ctx context.Context, f DashboardFilter, page Page) ([]DeliveryRow, bool, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	add("d.created_at >= ?", f.Since)
	// The same bound on the id lets the primary key's range do the work when
	// no other index applies; a minute's margin covers clocks that disagree.
	add("d.id >= ?", prefixDelivery+idFloor(f.Since.Add(-time.Minute)))
	for _, c := range []struct{ cond, v string }{
		{"d.status = ?", f.Status}, {"d.project_id = ?", f.ProjectID}, {"d.endpoint_id = ?", f.EndpointID},
		{"d.event_type = ?", f.EventType}, {"d.event_id = ?", f.EventID}, {"d.id = ?", f.DeliveryID},
		{"d.id < ?", page.Cursor},
	} {
		if c.v != "" {
			add(c.cond, c.v)
		}
	}
	args = append(args, page.Limit+1)
	rows, err := s.q.Query(ctx, `SELECT `+deliveryColumns+`, pr.name, p.url FROM deliveries d
		JOIN endpoints p ON p.id = d.endpoint_id JOIN projects pr ON pr.id = d.project_id
		WHERE `+strings.Join(where, " AND ")+`
		ORDER BY d.id DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, false, fmt.Errorf("dashboard deliveries: %w", err)
	}
	list, err := collect(rows, func(r pgx.Row) (DeliveryRow, error) {
		var d DeliveryRow
		err := r.Scan(&d.ID, &d.ProjectID, &d.EventID, &d.EndpointID, &d.EventType, &d.Status, &d.AttemptsCount,
			&d.NextAttemptAt, &d.LastStatusCode, &d.LastError, &d.CreatedAt, &d.UpdatedAt, &d.ProjectName, &d.EndpointURL)
		return d, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("dashboard deliveries: %w", err)
	}
	more := len(list) > page.Limit
	if more {
		list = list[:page.Limit]
	}
	return list, more, nil
}

// idFloor returns the smallest ULID of time t: every id made at or after t
// sorts at or above it.
func idFloor(t time.Time) string {
	var id ulid.ULID
	if err := id.SetTime(ulid.Timestamp(t)); err != nil {
		return ""
	}
	return id.String()
}

// DeliveryDetail is one delivery as the dashboard shows it: its attempts
// (oldest first), its event's payload, its endpoint and project, and the
// redelivery asked for and not yet attempted, if any.
type DeliveryDetail struct {
	webhookd.Delivery
	ProjectName       string
	EndpointURL       string
	EndpointActive    bool // active and not deleted: a redelivery would be accepted
	EventData         json.RawMessage
	PendingRedelivery *string // the request id of a manual attempt not yet made
}

// DashboardDelivery returns the delivery id of any project with its
// attempts, or not_found.
func (s *Store) DashboardDelivery(ctx context.Context, id string) (DeliveryDetail, error) {
	var d DeliveryDetail
	var projectID string
	err := s.q.QueryRow(ctx, `SELECT d.project_id, pr.name, p.url, p.status = 'active' AND p.deleted_at IS NULL,
			e.data, d.manual_request_id
		FROM deliveries d JOIN endpoints p ON p.id = d.endpoint_id JOIN projects pr ON pr.id = d.project_id
			JOIN events e ON e.id = d.event_id
		WHERE d.id = $1`, id).Scan(&projectID, &d.ProjectName, &d.EndpointURL, &d.EndpointActive, &d.EventData,
		&d.PendingRedelivery)
	if err != nil {
		return d, translate(err, "delivery")
	}
	d.Delivery, err = s.GetDelivery(ctx, projectID, id)
	return d, err
}

// DashboardProjects returns every project (at most 1000), by name, for the
// dashboard's project filter.
func (s *Store) DashboardProjects(ctx context.Context) ([]webhookd.Project, error) {
	rows, err := s.q.Query(ctx, `SELECT id, name FROM projects ORDER BY name LIMIT 1000`)
	if err != nil {
		return nil, fmt.Errorf("dashboard projects: %w", err)
	}
	return collect(rows, func(r pgx.Row) (webhookd.Project, error) {
		var p webhookd.Project
		err := r.Scan(&p.ID, &p.Name)
		return p, err
	})
}
