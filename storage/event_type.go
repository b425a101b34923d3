package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// EventType is an entry of a project's event-type catalog (SPEC §5b).
// Schema and Example are nil when not given.
type EventType struct {
	ProjectID   string
	Name        string
	Description string
	Schema      json.RawMessage
	Example     json.RawMessage
	Validate    bool
	Version     int
	ArchivedAt  *time.Time
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

const eventTypeColumns = `project_id, name, description, schema, example, validate, version, archived_at, created_at, updated_at`

func scanEventType(row pgx.Row) (EventType, error) {
	var t EventType
	var schema, example []byte
	err := row.Scan(&t.ProjectID, &t.Name, &t.Description, &schema, &example, &t.Validate, &t.Version, &t.ArchivedAt,
		&t.CreatedAt, &t.UpdatedAt)
	if schema != nil {
		t.Schema = schema
	}
	if example != nil {
		t.Example = example
	}
	return t, err
}

// jsonArg passes raw JSON to a jsonb column: nil as NULL.
func jsonArg(raw json.RawMessage) any {
	if raw == nil {
		return nil
	}
	return string(raw)
}

// constraintEventTypeKey is the primary key of event_types: a name taken.
const constraintEventTypeKey = "event_types_pkey"

// CreateEventType adds t to its project's catalog. A name already in the
// catalog (archived or not) is validation_failed naming "name".
func (s *Store) CreateEventType(ctx context.Context, t EventType, now time.Time) (EventType, error) {
	out, err := scanEventType(s.q.QueryRow(ctx, `INSERT INTO event_types (project_id, name, description, schema, example,
			validate, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING `+eventTypeColumns,
		t.ProjectID, t.Name, t.Description, jsonArg(t.Schema), jsonArg(t.Example), t.Validate, now))
	if code, constraint := pgCode(err); code == "23505" && constraint == constraintEventTypeKey {
		return out, webhookd.Invalid("name", "is already in the catalog (an archived type keeps its name; PATCH it with archived false)")
	}
	return out, translate(err, "event type")
}

// GetEventType returns the project's catalog entry name, archived or not,
// or not_found.
func (s *Store) GetEventType(ctx context.Context, projectID, name string) (EventType, error) {
	t, err := scanEventType(s.q.QueryRow(ctx, `SELECT `+eventTypeColumns+` FROM event_types
		WHERE project_id = $1 AND name = $2`, projectID, name))
	return t, translate(err, "event type")
}

// ListEventTypes returns a page of the project's catalog by name, after
// page.Cursor (a name), and whether more follow. Archived entries are left
// out unless archived is set.
func (s *Store) ListEventTypes(ctx context.Context, projectID string, archived bool, page Page) ([]EventType, bool, error) {
	rows, err := s.q.Query(ctx, `SELECT `+eventTypeColumns+` FROM event_types
		WHERE project_id = $1 AND ($2 OR archived_at IS NULL) AND ($3 = '' OR name > $3)
		ORDER BY name LIMIT $4`, projectID, archived, page.Cursor, page.Limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("list event types: %w", err)
	}
	list, err := collect(rows, scanEventType)
	if err != nil {
		return nil, false, fmt.Errorf("list event types: %w", err)
	}
	more := len(list) > page.Limit
	if more {
		list = list[:page.Limit]
	}
	return list, more, nil
}

// EventTypePatch changes the fields that are set. Schema and Example set
// to a pointer to nil clear them.
type EventTypePatch struct {
	Description *string
	Schema      *json.RawMessage
	Example     *json.RawMessage
	Validate    *bool
	Archived    *bool
}

// UpdateEventType applies p to the entry name and bumps its version. check
// sees the entry as it would be after the patch, inside the same
// transaction, and may refuse it (an example that does not match the
// schema); its error is returned as it is.
func (s *Store) UpdateEventType(ctx context.Context, projectID, name string, p EventTypePatch, now time.Time,
	check func(EventType) error) (EventType, error) {
	var out EventType
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		t, err := scanEventType(tx.QueryRow(ctx, `SELECT `+eventTypeColumns+` FROM event_types
			WHERE project_id = $1 AND name = $2 FOR UPDATE`, projectID, name))
		if err != nil {
			return translate(err, "event type")
		}
		if p.Description != nil {
			t.Description = *p.Description
		}
		if p.Schema != nil {
			t.Schema = *p.Schema
		}
		if p.Example != nil {
			t.Example = *p.Example
		}
		if p.Validate != nil {
			t.Validate = *p.Validate
		}
		if p.Archived != nil {
			switch {
			case *p.Archived && t.ArchivedAt == nil:
				t.ArchivedAt = &now
			case !*p.Archived:
				t.ArchivedAt = nil
			}
		}
		if err := check(t); err != nil {
			return err
		}
		out, err = scanEventType(tx.QueryRow(ctx, `UPDATE event_types SET description = $3, schema = $4, example = $5,
				validate = $6, archived_at = $7, version = version + 1, updated_at = $8
			WHERE project_id = $1 AND name = $2 RETURNING `+eventTypeColumns,
			projectID, name, t.Description, jsonArg(t.Schema), jsonArg(t.Example), t.Validate, t.ArchivedAt, now))
		return translate(err, "event type")
	})
	return out, err
}

// ValidatingEventTypes returns the name and version of each live entry of
// the project that sets validate: the types whose events the API checks.
func (s *Store) ValidatingEventTypes(ctx context.Context, projectID string) (map[string]int, error) {
	rows, err := s.q.Query(ctx, `SELECT name, version FROM event_types
		WHERE project_id = $1 AND validate AND archived_at IS NULL`, projectID)
	if err != nil {
		return nil, fmt.Errorf("validating event types: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var name string
		var version int
		if err := rows.Scan(&name, &version); err != nil {
			return nil, fmt.Errorf("validating event types: %w", err)
		}
		out[name] = version
	}
	return out, rows.Err()
}

// DashboardEventTypes returns up to limit live catalog entries by project
// and name: of projectID, or of every project when it is "".
func (s *Store) DashboardEventTypes(ctx context.Context, projectID string, limit int) ([]EventTypeRow, error) {
	rows, err := s.q.Query(ctx, `SELECT `+prefixed("t.", eventTypeColumns)+`, pr.name FROM event_types t
		JOIN projects pr ON pr.id = t.project_id
		WHERE t.archived_at IS NULL AND ($1 = '' OR t.project_id = $1)
		ORDER BY pr.name, t.name LIMIT $2`, projectID, limit)
	if err != nil {
		return nil, fmt.Errorf("dashboard event types: %w", err)
	}
	return collect(rows, func(r pgx.Row) (EventTypeRow, error) {
		var t EventTypeRow
		var schema, example []byte
		err := r.Scan(&t.ProjectID, &t.Name, &t.Description, &schema, &example, &t.Validate, &t.Version,
			&t.ArchivedAt, &t.CreatedAt, &t.UpdatedAt, &t.ProjectName)
		if schema != nil {
			t.Schema = schema
		}
		if example != nil {
			t.Example = example
		}
		return t, err
	})
}

// EventTypeRow is a catalog entry as the dashboard lists it: with its
// project's name.
type EventTypeRow struct {
	EventType
	ProjectName string
}

// prefixed qualifies each column of a comma-separated list with p.
func prefixed(p, columns string) string {
	var out []byte
	for i, c := range splitColumns(columns) {
		if i > 0 {
			out = append(out, ", "...)
		}
		out = append(out, p+c...)
	}
	return string(out)
}

func splitColumns(columns string) []string {
	var out []string
	for _, c := range strings.Split(columns, ",") {
		out = append(out, strings.TrimSpace(c))
	}
	return out
}
