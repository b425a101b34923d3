// Package dashboard serves webhookd's browser dashboard (SPEC §5): a login
// with the admin token, the deliveries of the last 14 days across every
// project with filters and cursor pages, one delivery with its payload and
// attempt history, a Redeliver button, and the dead letters, replayed by
// selection or all matching (as background jobs whose progress it shows),
// and the endpoints, with enable/disable, a test event, and their signing
// secret shown only on an explicit click, and rotated; and the inspector,
// request bins on the same listener (POST /in/{bin}) that show what a
// receiver gets and whether its signature verifies.
// Pages are server-rendered with templ; every action is a plain HTML form
// POST, so no JavaScript is needed (and the Content-Security-Policy allows
// none). Every POST is refused cross-origin by http.CrossOriginProtection.
//
// The dashboard reads and acts through storage and the Enqueuer, the same
// code as the public API; it has no SQL of its own.
package dashboard

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
)

// Config configures a Server. Zero values take the defaults named in each
// field's comment.
type Config struct {
	DB         *storage.DB       // required
	Enqueuer   webhookd.Enqueuer // hands redeliveries to the queue; nil: the reconciler picks them up
	Inspector  Inspector         // makes "Send to inspector" attempts; nil: no such button
	AdminToken string            // required: the login token (see NewAdminToken)
	Clock      webhookd.Clock    // default webhookd.SystemClock
	Logger     *slog.Logger      // default slog.Default()
	// Window is how far back the deliveries page looks; default 14 days.
	Window time.Duration
	// PageSize is the number of deliveries per page; default 50.
	PageSize int
	// SessionTTL is how long a login lasts; default 12h.
	SessionTTL time.Duration
	// FailedLogins limits failed logins per client IP: a burst of
	// FailedLoginBurst, then one more every FailedLoginEvery; defaults 5
	// and 12s (5 a minute).
	FailedLoginBurst int
	FailedLoginEvery time.Duration
	// InspectorKeep is how many requests an inspector bin keeps, the
	// newest; default 100. InspectorMaxBody is the largest body a bin
	// keeps; default 1 MiB.
	InspectorKeep    int
	InspectorMaxBody int64
	// ChartWindow is the span of the deliveries page's overview chart;
	// default 24h. ChartSettle is how old a minute must be before the
	// chart's rollup keeps its counts: longer than an attempt can take to
	// be recorded; default 5m (an attempt takes at most 85 s with the
	// default timeouts).
	ChartWindow time.Duration
	ChartSettle time.Duration
	// PortalFrameAncestors are the origins ("https://app.example.com")
	// whose pages may frame the portal (CSP frame-ancestors); default none:
	// the portal, like the operator's pages, cannot be framed.
	PortalFrameAncestors []string
	// AllowPrivateNetworks lets endpoint URLs entered in the portal name
	// loopback and private addresses, as the API's option; default false.
	AllowPrivateNetworks bool
	// TransformTimeout is how long an endpoint's transformation may run
	// when the endpoint form checks it or the preview tries it
	// (WEBHOOKD_TRANSFORM_TIMEOUT); default transform.DefaultBudget (50ms).
	TransformTimeout time.Duration
	// MaxPayloadBytes bounds the body a transformation makes in the
	// preview, as it does in delivery (WEBHOOKD_MAX_PAYLOAD_BYTES); default
	// webhookd.DefaultMaxPayloadBytes (65536).
	MaxPayloadBytes int64
}

// WithDefaults fills zero values.
func (c Config) WithDefaults() Config {
	if c.Clock == nil {
		c.Clock = webhookd.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Window == 0 {
		c.Window = 14 * 24 * time.Hour
	}
	if c.PageSize == 0 {
		c.PageSize = 50
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = 12 * time.Hour
	}
	if c.FailedLoginBurst == 0 {
		c.FailedLoginBurst = 5
	}
	if c.FailedLoginEvery == 0 {
		c.FailedLoginEvery = 12 * time.Second
	}
	if c.ChartWindow == 0 {
		c.ChartWindow = 24 * time.Hour
	}
	if c.ChartSettle == 0 {
		c.ChartSettle = 5 * time.Minute
	}
	if c.InspectorKeep == 0 {
		c.InspectorKeep = 100
	}
	if c.InspectorMaxBody == 0 {
		c.InspectorMaxBody = 1 << 20
	}
	if c.TransformTimeout == 0 {
		c.TransformTimeout = transform.DefaultBudget
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = webhookd.DefaultMaxPayloadBytes
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.DB == nil:
		return errors.New("dashboard: DB is required")
	case len(c.AdminToken) < 16:
		return errors.New("dashboard: the admin token must be at least 16 characters")
	case c.PageSize < 1 || c.PageSize > 500:
		return errors.New("dashboard: PageSize must be 1–500")
	case c.InspectorKeep < 1 || c.InspectorKeep > 1000:
		return errors.New("dashboard: InspectorKeep must be 1–1000")
	case c.ChartWindow < 10*time.Minute || c.ChartWindow > 7*24*time.Hour:
		return errors.New("dashboard: ChartWindow must be 10m–168h")
	case c.ChartSettle < 0:
		return errors.New("dashboard: ChartSettle must not be negative")
	case c.InspectorMaxBody < 1:
		return errors.New("dashboard: InspectorMaxBody must be positive")
	}
	for _, o := range c.PortalFrameAncestors {
		if !validFrameAncestor(o) {
			return fmt.Errorf("dashboard: PortalFrameAncestors: %q is not an origin such as https://app.example.com", o)
		}
	}
	return nil
}

// NewAdminToken returns a random admin token, for a process started without
// WEBHOOKD_ADMIN_TOKEN.
func NewAdminToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return "wha_" + base64.RawURLEncoding.EncodeToString(b)
}

// Server is the dashboard's http.Handler.
type Server struct {
	cfg      Config
	store    *storage.Store
	log      *slog.Logger
	sessions *sessions
	limiter  *loginLimiter
	handler  http.Handler
	// portalSessions and portalLimiter are the portal's sessions and its
	// limit on links that fail to open, per client address.
	portalSessions *portalSessions
	portalLimiter  *loginLimiter
	portalCSP      string
	// transforms checks and tries endpoints' transformations.
	transforms *transform.Engine
}

// New returns the dashboard.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, store: cfg.DB.Store(), log: cfg.Logger,
		sessions:       newSessions(cfg.AdminToken, cfg.SessionTTL),
		limiter:        newLoginLimiter(cfg.FailedLoginBurst, cfg.FailedLoginEvery),
		portalSessions: newPortalSessions(cfg.AdminToken, cfg.SessionTTL),
		portalLimiter:  newLoginLimiter(cfg.FailedLoginBurst, cfg.FailedLoginEvery),
		portalCSP:      portalCSP(cfg.PortalFrameAncestors),
		transforms:     transform.NewEngine(transform.Config{Budget: cfg.TransformTimeout, MaxOutput: int(cfg.MaxPayloadBytes)})}
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles()))
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	mux.Handle("GET /{$}", s.authed(s.deliveriesPage))
	mux.Handle("GET /deliveries/{id}", s.authed(s.deliveryPage))
	mux.Handle("POST /deliveries/{id}/redeliver", s.authed(s.redeliver))
	mux.Handle("POST /deliveries/{id}/inspect", s.authed(s.sendToInspector))
	mux.Handle("GET /inspector", s.authed(s.inspectorPage))
	mux.Handle("POST /inspector/bins", s.authed(s.createBin))
	mux.Handle("GET /inspector/bins/{id}", s.authed(s.binPage))
	mux.Handle("GET /inspector/requests/{id}", s.authed(s.requestPage))
	mux.HandleFunc("POST /in/{bin}", s.receive) // no login: senders post here
	mux.Handle("GET /dead-letters", s.authed(s.deadLettersPage))
	mux.Handle("POST /dead-letters/replay", s.authed(s.replayDeadLetters))
	mux.Handle("GET /jobs", s.authed(s.jobs))
	mux.Handle("GET /endpoints", s.authed(s.endpointsPage))
	mux.Handle("POST /endpoints/{id}/status", s.authed(s.setEndpointStatus))
	mux.Handle("POST /endpoints/{id}/test", s.authed(s.sendTestEvent))
	mux.Handle("POST /endpoints/{id}/max-in-flight", s.authed(s.setMaxInFlight))
	mux.Handle("POST /endpoints/{id}/secret", s.authed(s.revealSecret))
	mux.Handle("POST /endpoints/{id}/rotate-secret", s.authed(s.rotateSecret))
	mux.Handle("GET /endpoints/{id}", s.authed(s.endpointPage))
	mux.Handle("POST /endpoints/{id}", s.authed(s.updateEndpoint))
	mux.Handle("POST /endpoints/{id}/preview", s.authed(s.previewEndpoint))
	mux.Handle("GET /event-types", s.authed(s.eventTypesPage))
	mux.HandleFunc("GET /portal/open/{token}", s.openPortal)
	mux.Handle("/portal/", s.portal(s.portalMux()))
	mux.Handle("/", s.authed(func(w http.ResponseWriter, r *http.Request) {
		s.render(w, r, http.StatusNotFound, errorPage("Not found", "There is no page here."))
	}))
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.render(w, r, http.StatusForbidden, errorPage("Cross-origin request refused",
			"This form was posted from another site or origin, so nothing was done."))
	}))
	s.handler = s.securityHeaders(cop.Handler(mux))
	return s, nil
}

// ServeHTTP serves the dashboard.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// contentSecurityPolicy allows no script at all, styles only from the
// dashboard's own stylesheet, and forms that post only to the dashboard.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// portalCSP is the portal's policy: the dashboard's, but framable by the
// origins listed.
func portalCSP(ancestors []string) string {
	if len(ancestors) == 0 {
		return contentSecurityPolicy
	}
	return strings.Replace(contentSecurityPolicy, "frame-ancestors 'none'",
		"frame-ancestors "+strings.Join(ancestors, " "), 1)
}

// validFrameAncestor accepts an origin (scheme://host[:port], no path) or
// 'self': nothing that could end the directive or add another.
func validFrameAncestor(o string) bool {
	if o == "'self'" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.Path == "" &&
		u.RawQuery == "" && u.Fragment == "" && u.User == nil && !strings.ContainsAny(o, " ;,'\"\t\r\n")
}

// securityHeaders sets the headers every dashboard response carries. The
// operator's pages are never framed; the portal's may be, by the origins
// of Config.PortalFrameAncestors (so no X-Frame-Options then, which cannot
// name them), and its addresses may carry a session, so no Referer leaves
// them.
func (s *Server) securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("X-Content-Type-Options", "nosniff")
		if isPortalPath(r.URL.Path) {
			hd.Set("Content-Security-Policy", s.portalCSP)
			hd.Set("Referrer-Policy", "no-referrer")
			if len(s.cfg.PortalFrameAncestors) == 0 {
				hd.Set("X-Frame-Options", "DENY")
			}
		} else {
			hd.Set("Content-Security-Policy", contentSecurityPolicy)
			hd.Set("X-Frame-Options", "DENY")
			hd.Set("Referrer-Policy", "same-origin")
		}
		h.ServeHTTP(w, r)
	})
}

// authed lets only a logged-in browser through; others go to the login
// page (a GET comes back to where it was going once logged in).
func (s *Server) authed(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.sessions.valid(r, s.cfg.Clock.Now()) {
			h(w, r)
			return
		}
		next := "/"
		if r.Method == http.MethodGet {
			next = r.URL.RequestURI()
		}
		http.Redirect(w, r, "/login?next="+urlQueryEscape(next), http.StatusSeeOther)
	})
}
