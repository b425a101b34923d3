package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPIDocumentMatchesRoutes fails when a route registered in
// routes() is missing from openapi.json, or the document names a route
// that is not registered.
func TestOpenAPIDocumentMatchesRoutes(t *testing.T) {
	s := &Server{cfg: Config{}.WithDefaults(), mux: http.NewServeMux()}
	s.routes()
	var registered []string
	for _, p := range s.patterns {
		if p == "/" { // the catch-all that answers not_found
			continue
		}
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			t.Errorf("route %q has no method: every route must name one", p)
			continue
		}
		registered = append(registered, method+" "+path)
	}

	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	var documented []string
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is registered in api/server.go but missing from api/openapi.json", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(registered, d) {
			t.Errorf("api/openapi.json documents %s, which api/server.go does not register", d)
		}
	}
	if len(registered) < 18 {
		t.Fatalf("only %d routes found: %v", len(registered), registered)
	}
}
