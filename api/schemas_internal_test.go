package api

import (
	"encoding/json"
	"errors"
	"testing"
)

// TestStoredSchemaWithARelativeRef: a schema stored before relative $refs
// were refused (its $ref then resolved back to the schema itself) still
// compiles when an event of its type arrives, so that event gets the 4xx it
// got then rather than a 5xx; a new one with it is refused.
func TestStoredSchemaWithARelativeRef(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`{"$ref":"other.json","type":"string"}`)
	if _, err := compileSchema(raw); !errors.As(err, new(externalRefError)) {
		t.Fatalf("compileSchema: %v; want an externalRefError", err)
	}
	sch, err := compileStoredSchema(raw)
	if err != nil {
		t.Fatalf("compileStoredSchema: %v", err)
	}
	if err := validateData(sch, json.RawMessage(`1`), ""); err == nil {
		t.Fatal("1 matched a schema of type string")
	}
	if _, err := compileStoredSchema(json.RawMessage(`{"$ref":"https://example.com/s.json"}`)); !errors.As(err, new(externalRefError)) {
		t.Fatalf("an absolute external $ref compiled as stored: %v", err)
	}
}
