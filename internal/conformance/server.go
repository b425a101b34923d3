package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/webhookd/webhookd/internal/faultproxy"
	"github.com/webhookd/webhookd/storage"
)

// Session is one run of one case: a project of its own, and a fault proxy
// of its own in front of the API.
type Session struct {
	Case      Case
	ProxyURL  string // the base URL the client under test calls
	APIKey    string
	db        *storage.DB
	projectID string
	proxy     *faultproxy.Proxy
}

// NewSession makes the case's project (with its rate limit) in db and
// starts a proxy to apiURL with the case's faults.
func NewSession(ctx context.Context, db *storage.DB, apiURL string, c Case) (*Session, error) {
	// A project of its own each time: a project is found by name, and one
	// shared by two runs of a case would count both runs' events and limit.
	key, p, err := db.Store().CreateAPIKey(ctx, "conformance-"+c.Name+"-"+randomID(), storage.ProjectPlan{RateLimitPerMinute: c.RateLimit})
	if err != nil {
		return nil, fmt.Errorf("conformance: project for %s: %w", c.Name, err)
	}
	proxy := faultproxy.New(apiURL)
	proxy.SetRule(c.Rule())
	return &Session{Case: c, ProxyURL: proxy.URL, APIKey: key, db: db, projectID: p.ID, proxy: proxy}, nil
}

// Finish stops the proxy and checks out: the problems, none when the case
// passed.
func (s *Session) Finish(ctx context.Context, out Outcome) ([]string, error) {
	s.proxy.Close()
	var events int
	if err := s.db.Pool().QueryRow(ctx, "SELECT count(*) FROM events WHERE project_id = $1", s.projectID).Scan(&events); err != nil {
		return nil, fmt.Errorf("conformance: count events: %w", err)
	}
	return Check(s.Case, out, s.proxy.Requests(), events), nil
}

// Requests is what the session's proxy has seen.
func (s *Session) Requests() []faultproxy.Seen { return s.proxy.Requests() }

// Server is the control API other languages' runners use:
//
//	POST /sessions {"case":"<name>"} → {"id","api_url","api_key"}
//	POST /sessions/{id}/outcome <Outcome> → {"pass","problems","requests"}
type Server struct {
	file     *File
	db       *storage.DB
	apiURL   string
	mu       sync.Mutex
	sessions map[string]*Session
}

// NewServer serves sessions of file's cases against the API at apiURL,
// whose database is db.
func NewServer(file *File, db *storage.DB, apiURL string) *Server {
	return &Server{file: file, db: db, apiURL: apiURL, sessions: map[string]*Session{}}
}

// Handler is the control API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sessions", s.start)
	mux.HandleFunc("POST /sessions/{id}/outcome", s.finish)
	return mux
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Case string `json:"case"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c, ok := s.file.Case(in.Case)
	if !ok {
		http.Error(w, "no case "+in.Case, http.StatusNotFound)
		return
	}
	sess, err := NewSession(r.Context(), s.db, s.apiURL, c)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	id := randomID()
	s.mu.Lock()
	s.sessions[id] = sess
	s.mu.Unlock()
	writeJSON(w, map[string]string{"id": id, "api_url": sess.ProxyURL, "api_key": sess.APIKey})
}

func (s *Server) finish(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sess, ok := s.sessions[r.PathValue("id")]
	delete(s.sessions, r.PathValue("id"))
	s.mu.Unlock()
	if !ok {
		http.Error(w, "no such session", http.StatusNotFound)
		return
	}
	var out Outcome
	if err := json.NewDecoder(r.Body).Decode(&out); err != nil {
		sess.proxy.Close()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	problems, err := sess.Finish(r.Context(), out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if problems == nil {
		problems = []string{}
	}
	writeJSON(w, map[string]any{"pass": len(problems) == 0, "problems": problems, "requests": sess.Requests()})
}

// Close stops the proxies of sessions never finished.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, sess := range s.sessions {
		sess.proxy.Close()
		delete(s.sessions, id)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func randomID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
