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
// key, (status, id), (event_type, id)) instead of one generic plan for all.
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
	if f.ProjectID != "" && f.EndpointID != "" {
		where = append(where, endpointOfProject(&args, f.EndpointID, f.ProjectID))
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
			&d.NextAttemptAt, &d.LastStatusCode, &d.LastError, &d.CreatedAt, &d.UpdatedAt, &d.WaitingReason, &d.ProjectName, &d.EndpointURL)
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

// endpointOfProject returns a condition that holds when the endpoint
// belongs to the project, appending its arguments to args. It names no
// column of the outer query, so PostgreSQL checks it once, first: an
// endpoint of another project answers at once instead of reading every
// delivery of the endpoint to find none of the project.
func endpointOfProject(args *[]any, endpointID, projectID string) string {
	*args = append(*args, endpointID, projectID)
	n := len(*args)
	return "EXISTS (SELECT 1 FROM endpoints WHERE id = $" + strconv.Itoa(n-1) + " AND project_id = $" + strconv.Itoa(n) + ")"
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

// DashboardDeadLetterFilter selects dead letters for the dashboard. Empty
// fields do not filter; Since is required.
type DashboardDeadLetterFilter struct {
	ProjectID  string
	EndpointID string
	EventType  string
	Reason     string
	Since      time.Time // only dead letters made at or after it
}

// where returns the filter's WHERE clause and its arguments, naming only the
// filters given.
func (f DashboardDeadLetterFilter) where(cursor string) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	add("l.dead_lettered_at >= ?", f.Since)
	for _, c := range []struct{ cond, v string }{
		{"l.project_id = ?", f.ProjectID}, {"l.endpoint_id = ?", f.EndpointID}, {"l.event_type = ?", f.EventType},
		{"l.reason = ?", f.Reason}, {"l.id < ?", cursor},
	} {
		if c.v != "" {
			add(c.cond, c.v)
		}
	}
	if f.ProjectID != "" && f.EndpointID != "" {
		where = append(where, endpointOfProject(&args, f.EndpointID, f.ProjectID))
	}
	return strings.Join(where, " AND "), args
}

// DeadLetterRow is a dead letter as the dashboard lists it: with the name of
// its project and the URL of its endpoint.
type DeadLetterRow struct {
	webhookd.DeadLetter
	ProjectName string
	EndpointURL string
}

// DashboardDeadLetters returns a page of dead letters of every project
// matching f, replayed ones included, newest first, continuing after
// page.Cursor, and whether more follow.
func (s *Store) DashboardDeadLetters(ctx context.Context, f DashboardDeadLetterFilter, page Page) ([]DeadLetterRow, bool, error) {
	where, args := f.where(page.Cursor)
	args = append(args, page.Limit+1)
	rows, err := s.q.Query(ctx, `SELECT l.id, l.project_id, l.delivery_id, l.event_id, l.endpoint_id, l.event_type,
			l.reason, l.last_status_code, l.dead_lettered_at, l.replayed_at, l.replayed_by, pr.name, p.url
		FROM dead_letters l JOIN endpoints p ON p.id = l.endpoint_id JOIN projects pr ON pr.id = l.project_id
		WHERE `+where+` ORDER BY l.id DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, false, fmt.Errorf("dashboard dead letters: %w", err)
	}
	list, err := collect(rows, func(r pgx.Row) (DeadLetterRow, error) {
		var d DeadLetterRow
		err := r.Scan(&d.ID, &d.ProjectID, &d.DeliveryID, &d.EventID, &d.EndpointID, &d.EventType, &d.Reason,
			&d.LastStatusCode, &d.DeadLetteredAt, &d.ReplayedAt, &d.ReplayedBy, &d.ProjectName, &d.EndpointURL)
		return d, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("dashboard dead letters: %w", err)
	}
	more := len(list) > page.Limit
	if more {
		list = list[:page.Limit]
	}
	return list, more, nil
}

// DeadLetterRef names a dead letter's delivery and project.
type DeadLetterRef struct {
	ID         string
	ProjectID  string
	DeliveryID string
}

// DashboardDeadLettersByID returns the dead letters of ids that exist and
// are not replayed yet, in id order.
func (s *Store) DashboardDeadLettersByID(ctx context.Context, ids []string) ([]DeadLetterRef, error) {
	rows, err := s.q.Query(ctx, `SELECT id, project_id, delivery_id FROM dead_letters
		WHERE id = ANY($1) AND replayed_at IS NULL ORDER BY id`, ids)
	if err != nil {
		return nil, fmt.Errorf("dead letters by id: %w", err)
	}
	return collect(rows, func(r pgx.Row) (DeadLetterRef, error) {
		var d DeadLetterRef
		err := r.Scan(&d.ID, &d.ProjectID, &d.DeliveryID)
		return d, err
	})
}

// DeadLetterProjects returns the projects that have dead letters matching
// f not yet replayed: a replay job belongs to one project, so replaying
// everything matching across projects takes one job each.
func (s *Store) DeadLetterProjects(ctx context.Context, f DashboardDeadLetterFilter) ([]string, error) {
	where, args := f.where("")
	rows, err := s.q.Query(ctx, `SELECT DISTINCT l.project_id FROM dead_letters l
		WHERE `+where+` AND l.replayed_at IS NULL ORDER BY 1`, args...)
	if err != nil {
		return nil, fmt.Errorf("dead letter projects: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// JobRow is a job as the dashboard shows it: with its project's name.
type JobRow struct {
	webhookd.Job
	ProjectName string
}

// DashboardJobs returns the jobs of ids that exist, of any project, in id
// order.
func (s *Store) DashboardJobs(ctx context.Context, ids []string) ([]JobRow, error) {
	rows, err := s.q.Query(ctx, `SELECT j.id, j.project_id, j.kind, j.status, j.total, j.done, j.failed_count,
			j.created_at, j.finished_at, pr.name
		FROM jobs j JOIN projects pr ON pr.id = j.project_id WHERE j.id = ANY($1) ORDER BY j.id`, ids)
	if err != nil {
		return nil, fmt.Errorf("dashboard jobs: %w", err)
	}
	return collect(rows, func(r pgx.Row) (JobRow, error) {
		var j JobRow
		err := r.Scan(&j.ID, &j.ProjectID, &j.Kind, &j.Status, &j.Total, &j.Done, &j.FailedCount, &j.CreatedAt,
			&j.FinishedAt, &j.ProjectName)
		return j, err
	})
}

// RecentJobs returns up to limit jobs, newest first: of the project, or of
// every project when projectID is "".
func (s *Store) RecentJobs(ctx context.Context, projectID string, limit int) ([]JobRow, error) {
	rows, err := s.q.Query(ctx, `SELECT j.id, j.project_id, j.kind, j.status, j.total, j.done, j.failed_count,
			j.created_at, j.finished_at, pr.name
		FROM jobs j JOIN projects pr ON pr.id = j.project_id WHERE $1 = '' OR j.project_id = $1
		ORDER BY j.created_at DESC, j.id DESC LIMIT $2`, projectID, limit)
	if err != nil {
		return nil, fmt.Errorf("recent jobs: %w", err)
	}
	return collect(rows, func(r pgx.Row) (JobRow, error) {
		var j JobRow
		err := r.Scan(&j.ID, &j.ProjectID, &j.Kind, &j.Status, &j.Total, &j.Done, &j.FailedCount, &j.CreatedAt,
			&j.FinishedAt, &j.ProjectName)
		return j, err
	})
}

// EndpointRow is an endpoint as the dashboard lists it: with its project's
// name and its latest delivery, if any.
type EndpointRow struct {
	ID             string
	ProjectID      string
	ProjectName    string
	URL            string
	Description    string
	Status         string
	DisabledReason *string
	CreatedAt      time.Time
	// The endpoint's latest delivery; LastDeliveryID is nil when it has none.
	LastDeliveryID     *string
	LastDeliveryStatus *string
	LastStatusCode     *int
	LastError          *string
	LastUpdatedAt      *time.Time
	// The endpoint's deliveries made since the time given to
	// DashboardEndpoints, by where they stand now; Due are those of
	// Waiting whose attempt is due and not in flight: they wait for room.
	Succeeded, DeadLettered, Waiting, Due int
	// MaxInFlight is the ceiling of its adaptive limit; Load its limit and
	// requests in flight summed over the live workers (zero while none
	// delivers to it lately).
	MaxInFlight int
	Load        EndpointLoad
	// Circuit is its breaker's state, and ProbeAt the next probe while it
	// is not closed.
	Circuit string
	ProbeAt *time.Time
	// Ordering is webhookd.OrderingNone or webhookd.OrderingFIFO.
	Ordering string
}

// DashboardEndpoints returns a page of the live endpoints of projectID (of
// every project when it is ""), newest first, and whether more follow. Each comes with its latest
// delivery (one index probe of (endpoint_id, id)) and the counts of its
// deliveries made since since by state (ranges of the same index, so they
// read those endpoints' deliveries of the period, never the attempts).
func (s *Store) DashboardEndpoints(ctx context.Context, projectID string, since time.Time, page Page) ([]EndpointRow, bool, error) {
	rows, err := s.q.Query(ctx, `SELECT p.id, p.project_id, pr.name, p.url, p.description, p.status, p.disabled_reason,
			p.created_at, p.max_in_flight, p.circuit, p.probe_at, p.ordering, l.id, l.status, l.last_status_code, l.last_error, l.updated_at
		FROM endpoints p JOIN projects pr ON pr.id = p.project_id
			-- The latest id alone, so that deliveries_endpoint_idx answers it
			-- from the index: asked for more columns, the planner may walk
			-- the primary key backwards instead, through every row for an
			-- endpoint without deliveries.
			LEFT JOIN LATERAL (SELECT d.id FROM deliveries d
				WHERE d.endpoint_id = p.id ORDER BY d.id DESC LIMIT 1) m ON true
			LEFT JOIN deliveries l ON l.id = m.id
		WHERE p.deleted_at IS NULL AND ($1 = '' OR p.id < $1) AND ($3 = '' OR p.project_id = $3)
		ORDER BY p.id DESC LIMIT $2`, page.Cursor, page.Limit+1, projectID)
	if err != nil {
		return nil, false, fmt.Errorf("dashboard endpoints: %w", err)
	}
	list, err := collect(rows, func(r pgx.Row) (EndpointRow, error) {
		var e EndpointRow
		err := r.Scan(&e.ID, &e.ProjectID, &e.ProjectName, &e.URL, &e.Description, &e.Status, &e.DisabledReason,
			&e.CreatedAt, &e.MaxInFlight, &e.Circuit, &e.ProbeAt, &e.Ordering, &e.LastDeliveryID, &e.LastDeliveryStatus, &e.LastStatusCode, &e.LastError, &e.LastUpdatedAt)
		return e, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("dashboard endpoints: %w", err)
	}
	more := len(list) > page.Limit
	if more {
		list = list[:page.Limit]
	}
	if err := s.endpointHealth(ctx, list, since); err != nil {
		return nil, false, err
	}
	ids := make([]string, len(list))
	for i := range list {
		ids[i] = list[i].ID
	}
	loads, err := s.EndpointLoads(ctx, ids)
	for i := range list {
		list[i].Load = loads[list[i].ID]
	}
	return list, more, err
}

// endpointHealth fills in the counts of each endpoint's deliveries made
// since since, by state, in one query over the (endpoint_id, id) ranges of
// the page's endpoints. The bound is on the id alone (its ULID time is when
// the delivery was made): a condition on created_at would let the planner
// scan every endpoint's deliveries of the period instead.
func (s *Store) endpointHealth(ctx context.Context, list []EndpointRow, since time.Time) error {
	if len(list) == 0 {
		return nil
	}
	ids := make([]string, len(list))
	at := make(map[string]*EndpointRow, len(list))
	for i := range list {
		ids[i], at[list[i].ID] = list[i].ID, &list[i]
	}
	rows, err := s.q.Query(ctx, `SELECT endpoint_id, count(*) FILTER (WHERE status = 'succeeded'),
			count(*) FILTER (WHERE status = 'dead_letter'), count(*) FILTER (WHERE status IN ('pending', 'retrying')),
			count(*) FILTER (WHERE next_attempt_at <= now() AND (lease_until IS NULL OR lease_until <= now()))
		FROM deliveries WHERE endpoint_id = ANY($1) AND id >= $2 GROUP BY endpoint_id`,
		ids, prefixDelivery+idFloor(since))
	if err != nil {
		return fmt.Errorf("endpoint health: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var ok, dead, waiting, due int
		if err := rows.Scan(&id, &ok, &dead, &waiting, &due); err != nil {
			return fmt.Errorf("endpoint health: %w", err)
		}
		e := at[id]
		e.Succeeded, e.DeadLettered, e.Waiting, e.Due = ok, dead, waiting, due
	}
	return rows.Err()
}

// DashboardEndpoint returns the live endpoint id of any project, or
// not_found.
func (s *Store) DashboardEndpoint(ctx context.Context, id string) (webhookd.Endpoint, error) {
	e, err := s.scanEndpoint(s.q.QueryRow(ctx, `SELECT `+endpointColumns+` FROM endpoints
		WHERE id = $1 AND deleted_at IS NULL`, id))
	return e, translate(err, "endpoint")
}

// LifecycleEntry is one operational event about an endpoint
// (webhookd.endpoint.*): its type, data and time.
type LifecycleEntry struct {
	EventID   string
	Type      string
	Data      json.RawMessage
	CreatedAt time.Time
}

// EndpointLifecycle returns the latest limit operational events about
// endpoint id (circuit opened and closed, disabled), newest first.
func (s *Store) EndpointLifecycle(ctx context.Context, projectID, id string, limit int) ([]LifecycleEntry, error) {
	rows, err := s.q.Query(ctx, `SELECT id, type, data, created_at FROM events
		WHERE type LIKE 'webhookd.endpoint.%' AND data->>'endpoint_id' = $2 AND project_id = $1
		ORDER BY id DESC LIMIT $3`, projectID, id, limit)
	if err != nil {
		return nil, fmt.Errorf("endpoint lifecycle: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LifecycleEntry, error) {
		var e LifecycleEntry
		err := r.Scan(&e.EventID, &e.Type, &e.Data, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("endpoint lifecycle: %w", err)
	}
	return out, nil
}
