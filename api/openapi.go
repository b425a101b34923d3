package api

import (
	"bytes"
	_ "embed"
	"net/http"

	"github.com/webhookd/webhookd/storage"
)

// openAPIDocument is the OpenAPI 3.1 document of this API, kept beside the
// handlers it describes; openapi_test.go fails when a route registered in
// routes() and the document disagree.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns the OpenAPI 3.1 document of the public API.
func OpenAPIDocument() []byte { return bytes.Clone(openAPIDocument) }

// public registers a route served without auth or rate limit.
func (s *Server) public(pattern string, h http.HandlerFunc) {
	s.patterns = append(s.patterns, pattern)
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", storage.NewRequestID())
		h(w, r)
	})
}

// serveOpenAPI serves GET /v1/openapi.json.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Write(openAPIDocument)
}
