package dashboard

import (
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// The integrators' portal (SPEC §5b): the dashboard's own pages and
// handlers, in a portal session's scope, under /portal/.
//
//	GET /portal/open/{token}   a one-time link: spends it, starts a session
//	/portal/s/{session}/...    the pages, the session in the path
//	/portal/...                the pages, the session in its cookie
//
// Opening a link sets the cookie and goes to the path form; a GET there
// that arrives with the cookie goes on to the cookie form, so the session
// leaves the address bar wherever the browser keeps the cookie. In a frame
// on another site (third-party cookies blocked, or SameSite withheld) it
// never arrives, and the pages carry the session in every link and form.

// portalMux is the portal's routes, relative to a scope's Base.
func (s *Server) portalMux() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", s.deliveriesPage)
	m.HandleFunc("GET /deliveries/{id}", s.deliveryPage)
	m.HandleFunc("POST /deliveries/{id}/redeliver", s.redeliver)
	m.HandleFunc("GET /dead-letters", s.deadLettersPage)
	m.HandleFunc("POST /dead-letters/replay", s.replayDeadLetters)
	m.HandleFunc("GET /jobs", s.jobs)
	m.HandleFunc("GET /endpoints", s.endpointsPage)
	m.HandleFunc("POST /endpoints", s.createEndpoint)
	m.HandleFunc("GET /endpoints/{id}", s.endpointPage)
	m.HandleFunc("POST /endpoints/{id}", s.updateEndpoint)
	m.HandleFunc("POST /endpoints/{id}/preview", s.previewEndpoint)
	m.HandleFunc("POST /endpoints/{id}/status", s.setEndpointStatus)
	m.HandleFunc("POST /endpoints/{id}/test", s.sendTestEvent)
	m.HandleFunc("POST /endpoints/{id}/max-in-flight", s.setMaxInFlight)
	m.HandleFunc("POST /endpoints/{id}/secret", s.revealSecret)
	m.HandleFunc("POST /endpoints/{id}/rotate-secret", s.rotateSecret)
	m.HandleFunc("GET /event-types", s.eventTypesPage)
	m.HandleFunc("POST /logout", s.portalLogout)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.render(w, r, http.StatusNotFound, errorPage("Not found", "There is no page here."))
	})
	return m
}

// portalLinkFailures says why a link did not open (status 410 each).
var portalLinkFailures = map[error]string{
	storage.ErrPortalLinkSpent:   "This link was used already: each link opens the portal once. Ask for a new one.",
	storage.ErrPortalLinkExpired: "This link has expired. Ask for a new one.",
	storage.ErrPortalLinkUnknown: "This link is not valid: it may be mistyped, or so old it was removed. Ask for a new one.",
}

// openPortal spends a one-time link and starts a portal session for its
// project. A client whose links failed too often lately is refused before
// the token is even looked up.
func (s *Server) openPortal(w http.ResponseWriter, r *http.Request) {
	now, ip := s.cfg.Clock.Now(), clientIP(r)
	if wait := s.portalLimiter.wait(ip, now); wait > 0 {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		s.render(w, r, http.StatusTooManyRequests, portalMessage("Too many tries",
			fmt.Sprintf("Too many links that did not open came from your address: try again in %d s.", secs)))
		return
	}
	p, err := s.store.SpendPortalLink(r.Context(), r.PathValue("token"), now)
	if msg, ok := portalLinkFailures[err]; ok {
		s.portalLimiter.failed(ip, now)
		s.log.Warn("portal: link did not open", "client_ip", ip, "reason", err)
		s.render(w, r, http.StatusGone, portalMessage("Link not valid", msg))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sess := s.portalSessions.issue(p.ID, now)
	setPortalCookie(w, r, sess.token, int(s.cfg.SessionTTL.Seconds()))
	s.log.Info("portal: session started", "project_id", p.ID, "client_ip", ip)
	http.Redirect(w, r, "/portal/s/"+sess.token+"/", http.StatusSeeOther)
}

// portal serves the portal's pages in the scope of the session that the
// path or the cookie carries; without one, a page that says so (401),
// never the operator's login.
func (s *Server) portal(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := s.cfg.Clock.Now()
		rest := strings.TrimPrefix(r.URL.Path, "/portal")
		var sess portalSession
		var ok bool
		base := "/portal"
		if after, inPath := strings.CutPrefix(rest, "/s/"); inPath {
			token, tail, _ := strings.Cut(after, "/")
			if sess, ok = s.portalSessions.check(token, now); ok {
				base, rest = "/portal/s/"+token, "/"+tail
				// The cookie arrived too: drop the session from the address.
				if c, err := r.Cookie(portalCookie); err == nil && r.Method == http.MethodGet {
					if cs, cok := s.portalSessions.check(c.Value, now); cok && cs.id == sess.id {
						target := "/portal" + rest
						if r.URL.RawQuery != "" {
							target += "?" + r.URL.RawQuery
						}
						http.Redirect(w, r, target, http.StatusSeeOther)
						return
					}
				}
			}
		} else if c, err := r.Cookie(portalCookie); err == nil {
			sess, ok = s.portalSessions.check(c.Value, now)
		}
		if !ok {
			s.render(w, r, http.StatusUnauthorized, portalMessage("Portal session ended",
				"Your portal session has ended or this address is not valid. Open a new portal link to continue."))
			return
		}
		name, err := s.store.ProjectName(r.Context(), sess.projectID)
		if webhookd.ErrorCode(err) == webhookd.CodeNotFound {
			s.render(w, r, http.StatusUnauthorized, portalMessage("Portal session ended", "This project no longer exists."))
			return
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		sc := scope{ProjectID: sess.projectID, ProjectName: name, Base: base}
		r2 := r.Clone(withScope(withSession(r.Context(), sess), sc))
		r2.URL.Path, r2.URL.RawPath = rest, ""
		h.ServeHTTP(w, r2)
	})
}

// portalLogout ends the session here and clears its cookie.
func (s *Server) portalLogout(w http.ResponseWriter, r *http.Request) {
	if sess, ok := sessionOf(r.Context()); ok {
		s.portalSessions.revoke(sess, s.cfg.Clock.Now())
	}
	setPortalCookie(w, r, "", -1)
	s.render(w, r.WithContext(withScope(r.Context(), scope{})), http.StatusOK,
		portalMessage("Logged out", "You have left the portal. Open a new portal link to come back."))
}

// isPortalPath reports whether a request is for the portal (its own
// security headers).
func isPortalPath(p string) bool { return p == "/portal" || strings.HasPrefix(p, "/portal/") }
