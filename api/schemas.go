package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// schemaBase is where a catalog schema is taken to live while it compiles:
// a hierarchical URL, so that a relative $ref ("address.json") resolves to
// a document of its own — refused, as nothing is loaded — rather than, as
// against a URN, back to the schema itself. .invalid names no host (RFC
// 2606), and nothing is fetched from it anyway.
const schemaBase = "https://webhookd.invalid/"

// externalRefError is a schema that refers to a document outside itself:
// a $ref to a file or URL (or a relative one), or a $schema that is not a
// draft the library knows.
type externalRefError struct {
	ref    string // as resolved, relative to schemaBase when it was relative
	schema bool   // the top-level $schema, not a $ref
}

func (e externalRefError) Error() string {
	if e.schema {
		return fmt.Sprintf("$schema %q is not a JSON Schema draft webhookd knows (draft-04 to 2020-12); "+
			"schemas must be self-contained", e.ref)
	}
	return fmt.Sprintf("external $ref %q is not allowed; schemas must be self-contained "+
		"(a $ref may point only inside the schema, e.g. \"#/$defs/price\")", e.ref)
}

// compileSchema compiles a JSON Schema of the catalog (draft 2020-12 unless
// it names another with $schema). It loads nothing from outside: a $ref
// may point only inside the schema (or at a meta-schema), never at a file
// or URL, so a schema cannot make the server read its disk or the network;
// one that tries is an externalRefError.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	return compileSchemaAt(raw, schemaBase+"event-type.json")
}

// compileStoredSchema compiles a schema of the catalog as stored. One
// stored before relative $refs were refused, whose relative $ref resolved
// against a URN back to the schema itself, compiles as it did then.
func compileStoredSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	sch, err := compileSchema(raw)
	if errors.As(err, new(externalRefError)) {
		if old, oldErr := compileSchemaAt(raw, "urn:webhookd:event-type"); oldErr == nil {
			return old, nil
		}
	}
	return sch, err
}

func compileSchemaAt(raw json.RawMessage, loc string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{}) // every scheme refused
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(loc)
	var le *jsonschema.LoadURLError
	if errors.As(err, &le) {
		top, _ := doc.(map[string]any)
		return nil, externalRefError{ref: strings.TrimPrefix(le.URL, schemaBase), schema: top["$schema"] == le.URL}
	}
	return sch, err
}

// validateData checks data against sch. A mismatch is validation_failed
// whose field is prefix + "data" and the path of the first failing value
// ("data.items[2].price"); the message says what is wrong there.
func validateData(sch *jsonschema.Schema, data json.RawMessage, prefix string) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return webhookd.Invalid(prefix+"data", "is not JSON the schema can read")
	}
	err = sch.Validate(inst)
	var ve *jsonschema.ValidationError
	if err == nil {
		return nil
	}
	if !errors.As(err, &ve) {
		return webhookd.Invalid(prefix+"data", "could not be checked against the schema: %v", err)
	}
	leaf := ve
	for len(leaf.Causes) > 0 {
		leaf = leaf.Causes[0]
	}
	field := prefix + "data" + instancePath(leaf.InstanceLocation)
	return &webhookd.Error{Code: webhookd.CodeValidationFailed, Field: field,
		Message: field + ": does not match the event type's schema: " + leaf.ErrorKind.LocalizedString(englishMessages)}
}

var englishMessages = message.NewPrinter(language.English)

// instancePath renders a JSON location as .name and [index] steps.
func instancePath(loc []string) string {
	var b strings.Builder
	for _, p := range loc {
		if _, err := strconv.Atoi(p); err == nil {
			b.WriteString("[" + p + "]")
		} else {
			b.WriteString("." + p)
		}
	}
	return b.String()
}

// schemaCacheTTL is how long a project's list of validating event types is
// reused before PostgreSQL is asked again: a catalog change made through
// another process applies within it (one made through this one, at once).
const schemaCacheTTL = time.Second

// schemaCache holds, per project, which event types validate (by name and
// version), and the compiled schemas by (project, name, version), so an
// event request costs a map lookup, and a query at most once a second per
// project.
type schemaCache struct {
	mu       sync.Mutex
	projects map[string]validatingTypes
	compiled map[schemaKey]*jsonschema.Schema
}

type validatingTypes struct {
	versions map[string]int
	at       time.Time
}

type schemaKey struct {
	project, name string
	version       int
}

// maxCachedProjects bounds the cache: past it, it starts empty again.
const maxCachedProjects = 10000

func newSchemaCache() *schemaCache {
	return &schemaCache{projects: map[string]validatingTypes{}, compiled: map[schemaKey]*jsonschema.Schema{}}
}

// forget drops what the cache knows of a project (its catalog changed).
func (c *schemaCache) forget(projectID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.projects, projectID)
	for k := range c.compiled {
		if k.project == projectID {
			delete(c.compiled, k)
		}
	}
}

// validateEvents checks the data of each event whose type the project's
// catalog marks validate against the type's schema (SPEC §5b), before the
// events are written; prefix names an event's place in a batch.
func (s *eventChecker) validateEvents(ctx context.Context, projectID string, evs []storage.NewEvent, prefix func(int) string) error {
	types, err := s.validatingTypes(ctx, projectID)
	if err != nil || len(types) == 0 {
		return err
	}
	for i, ev := range evs {
		version, ok := types[ev.Type]
		if !ok {
			continue
		}
		sch, err := s.schemaOf(ctx, projectID, ev.Type, version)
		if err != nil {
			return err
		}
		if sch == nil { // changed meanwhile: no longer validating
			continue
		}
		if err := validateData(sch, ev.Data, prefix(i)); err != nil {
			return err
		}
	}
	return nil
}

func (s *eventChecker) validatingTypes(ctx context.Context, projectID string) (map[string]int, error) {
	c := s.schemas
	now := time.Now()
	c.mu.Lock()
	v, ok := c.projects[projectID]
	c.mu.Unlock()
	if ok && now.Sub(v.at) < schemaCacheTTL {
		return v.versions, nil
	}
	versions, err := s.db.Store().ValidatingEventTypes(ctx, projectID)
	if err != nil {
		return nil, fmt.Errorf("event type catalog: %w", err)
	}
	c.mu.Lock()
	if len(c.projects) >= maxCachedProjects {
		c.projects, c.compiled = map[string]validatingTypes{}, map[schemaKey]*jsonschema.Schema{}
	}
	c.projects[projectID] = validatingTypes{versions: versions, at: now}
	c.mu.Unlock()
	return versions, nil
}

// schemaOf returns the compiled schema of a version of an event type,
// compiling it once; nil when the type no longer validates at that
// version.
func (s *eventChecker) schemaOf(ctx context.Context, projectID, name string, version int) (*jsonschema.Schema, error) {
	c := s.schemas
	key := schemaKey{projectID, name, version}
	c.mu.Lock()
	sch, ok := c.compiled[key]
	c.mu.Unlock()
	if ok {
		return sch, nil
	}
	t, err := s.db.Store().GetEventType(ctx, projectID, name)
	if webhookd.ErrorCode(err) == webhookd.CodeNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if t.Version != version || !t.Validate || t.ArchivedAt != nil || t.Schema == nil {
		s.schemas.forget(projectID)
		return nil, nil
	}
	if sch, err = compileStoredSchema(t.Schema); err != nil { // it compiled when stored
		return nil, fmt.Errorf("event type %s: schema: %w", name, err)
	}
	c.mu.Lock()
	for k := range c.compiled { // older versions of the type are done with
		if k.project == projectID && k.name == name {
			delete(c.compiled, k)
		}
	}
	c.compiled[key] = sch
	c.mu.Unlock()
	return sch, nil
}
