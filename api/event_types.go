package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// maxEventTypeDescription caps an event type's description.
const maxEventTypeDescription = 4096

type eventTypeJSON struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Example     json.RawMessage `json:"example"`
	Validate    bool            `json:"validate"`
	Archived    bool            `json:"archived"`
	CreatedAt   string          `json:"created_at"`
	UpdatedAt   string          `json:"updated_at"`
}

func eventTypeOut(t storage.EventType) eventTypeJSON {
	out := eventTypeJSON{Name: t.Name, Description: t.Description, Schema: t.Schema, Example: t.Example,
		Validate: t.Validate, Archived: t.ArchivedAt != nil, CreatedAt: timeString(t.CreatedAt),
		UpdatedAt: timeString(t.UpdatedAt)}
	if out.Schema == nil {
		out.Schema = json.RawMessage("null")
	}
	if out.Example == nil {
		out.Example = json.RawMessage("null")
	}
	return out
}

// isNull reports whether raw is JSON null (or absent).
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// checkEventType validates an entry as it would be stored: a schema that
// compiles (an object or a boolean), an example that matches it, and
// validate only with a schema.
func checkEventType(t storage.EventType) error {
	if len(t.Description) > maxEventTypeDescription {
		return webhookd.Invalid("description", "must be at most %d characters", maxEventTypeDescription)
	}
	if t.Schema == nil {
		if t.Validate {
			return webhookd.Invalid("validate", "needs a schema to validate against")
		}
		return nil
	}
	if s := bytes.TrimSpace(t.Schema); len(s) == 0 || (s[0] != '{' && !bytes.Equal(s, []byte("true")) && !bytes.Equal(s, []byte("false"))) {
		return webhookd.Invalid("schema", "must be a JSON Schema: an object or a boolean")
	}
	sch, err := compileSchema(t.Schema)
	var xe externalRefError
	switch {
	case errors.As(err, &xe):
		return webhookd.Invalid("schema", "%v", xe)
	case err != nil:
		return webhookd.Invalid("schema", "is not a valid JSON Schema (2020-12): %v", err)
	}
	if t.Example != nil {
		if err := validateData(sch, t.Example, ""); err != nil {
			ae := err.(*webhookd.Error)
			field := "example" + ae.Field[len("data"):]
			return &webhookd.Error{Code: webhookd.CodeValidationFailed, Field: field,
				Message: field + ae.Message[len(ae.Field):]}
		}
	}
	return nil
}

// createEventType serves POST /v1/event-types.
func (s *Server) createEventType(c *call) (int, any, error) {
	var (
		t               storage.EventType
		schema, example json.RawMessage
	)
	present, err := decodeObject(c.body, "", map[string]any{"name": &t.Name, "description": &t.Description,
		"schema": &schema, "example": &example, "validate": &t.Validate})
	if err != nil {
		return 0, nil, err
	}
	if !present["name"] {
		return 0, nil, webhookd.Invalid("name", "is required")
	}
	if !eventTypePattern.MatchString(t.Name) {
		return 0, nil, webhookd.Invalid("name", "must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
	}
	if !isNull(schema) {
		t.Schema = compactJSON(schema)
	}
	if !isNull(example) {
		t.Example = compactJSON(example)
	}
	if err := checkEventType(t); err != nil {
		return 0, nil, err
	}
	t.ProjectID = c.project.ID
	out, err := c.store.CreateEventType(c.ctx, t, s.clock.Now())
	if err != nil {
		return 0, nil, err
	}
	s.schemas.forget(c.project.ID)
	return http.StatusCreated, eventTypeOut(out), nil
}

// listEventTypes serves GET /v1/event-types: the catalog by name, a page
// at a time; archived entries only with ?archived=true.
func (s *Server) listEventTypes(c *call) (int, any, error) {
	page, err := pageOf(c.r)
	if err != nil {
		return 0, nil, err
	}
	archived := false
	switch c.r.URL.Query().Get("archived") {
	case "", "false":
	case "true":
		archived = true
	default:
		return 0, nil, webhookd.Invalid("archived", `must be "true" or "false"`)
	}
	list, more, err := c.store.ListEventTypes(c.ctx, c.project.ID, archived, page)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, pageOut(list, more, eventTypeOut, func(t storage.EventType) string { return t.Name }), nil
}

// eventTypeName is the {name} of the path, or not_found when no event type
// could have it.
func eventTypeName(c *call) (string, error) {
	name := c.r.PathValue("name")
	if !eventTypePattern.MatchString(name) {
		return "", &webhookd.Error{Code: webhookd.CodeNotFound, Message: "event type not found"}
	}
	return name, nil
}

// getEventType serves GET /v1/event-types/{name}, archived or not.
func (s *Server) getEventType(c *call) (int, any, error) {
	name, err := eventTypeName(c)
	if err != nil {
		return 0, nil, err
	}
	t, err := c.store.GetEventType(c.ctx, c.project.ID, name)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, eventTypeOut(t), nil
}

// patchEventType serves PATCH /v1/event-types/{name}: any of description,
// schema and example (null clears them), validate, archived.
func (s *Server) patchEventType(c *call) (int, any, error) {
	name, err := eventTypeName(c)
	if err != nil {
		return 0, nil, err
	}
	var (
		description        *string
		schema, example    json.RawMessage
		validate, archived *bool
	)
	present, err := decodeObject(c.body, "", map[string]any{"description": &description, "schema": &schema,
		"example": &example, "validate": &validate, "archived": &archived})
	if err != nil {
		return 0, nil, err
	}
	var p storage.EventTypePatch
	if present["description"] {
		if description == nil {
			description = new(string)
		}
		p.Description = description
	}
	for _, f := range []struct {
		key string
		raw json.RawMessage
		dst **json.RawMessage
	}{{"schema", schema, &p.Schema}, {"example", example, &p.Example}} {
		if !present[f.key] {
			continue
		}
		var v json.RawMessage
		if !isNull(f.raw) {
			v = compactJSON(f.raw)
		}
		*f.dst = &v
	}
	for key, v := range map[string]*bool{"validate": validate, "archived": archived} {
		if present[key] && v == nil {
			return 0, nil, webhookd.Invalid(key, "must be true or false")
		}
	}
	p.Validate, p.Archived = validate, archived
	t, err := c.store.UpdateEventType(c.ctx, c.project.ID, name, p, s.clock.Now(), checkEventType)
	if err != nil {
		return 0, nil, err
	}
	s.schemas.forget(c.project.ID)
	return http.StatusOK, eventTypeOut(t), nil
}

// deleteEventType serves DELETE /v1/event-types/{name}: it archives the
// entry (events of the type are accepted unchecked from then on) and
// answers 200 with it.
func (s *Server) deleteEventType(c *call) (int, any, error) {
	name, err := eventTypeName(c)
	if err != nil {
		return 0, nil, err
	}
	yes := true
	t, err := c.store.UpdateEventType(c.ctx, c.project.ID, name, storage.EventTypePatch{Archived: &yes}, s.clock.Now(),
		func(storage.EventType) error { return nil })
	if err != nil {
		return 0, nil, err
	}
	s.schemas.forget(c.project.ID)
	return http.StatusOK, eventTypeOut(t), nil
}
