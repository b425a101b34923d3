package dashboard

import (
	"context"
	"net/http"

	"github.com/a-h/templ"
)

// scope is whose pages a request sees. The operator's (the zero scope)
// sees every project at the dashboard's root; a portal session's sees one
// project under its Base (SPEC §5b). Every page and handler is the same
// code for both: the components build their links with u, the handlers
// narrow their reads and check what a path names with it.
type scope struct {
	ProjectID   string // "" for the operator
	ProjectName string
	// Base prefixes every path of the scope's pages: "" for the
	// operator, "/portal" for a portal session carried by its cookie, and
	// "/portal/s/<session>" for one carried in the path (in a frame whose
	// cookies the browser blocks).
	Base string
}

// portal reports whether the scope is a portal session's.
func (sc scope) portal() bool { return sc.ProjectID != "" }

// url returns the path p ("/..." of the operator's pages) in this scope.
func (sc scope) url(p string) string { return sc.Base + p }

// actor names who asked for a redelivery, as recorded with it.
func (sc scope) actor() string {
	if sc.portal() {
		return "portal"
	}
	return "dashboard"
}

// owns reports whether something of project projectID may be seen in this
// scope: anything by the operator, only its own project's by a portal.
func (sc scope) owns(projectID string) bool { return !sc.portal() || projectID == sc.ProjectID }

type scopeKey struct{}

func withScope(ctx context.Context, sc scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, sc)
}

// scopeOf returns the scope of a request's context: the operator's unless
// the portal set another.
func scopeOf(ctx context.Context) scope {
	sc, _ := ctx.Value(scopeKey{}).(scope)
	return sc
}

// u is the link to path p in the scope of ctx, for the components.
func u(ctx context.Context, p string) templ.SafeURL { return templ.URL(scopeOf(ctx).url(p)) }

// redirect answers 303 to path p in the request's scope.
func redirect(w http.ResponseWriter, r *http.Request, p string) {
	http.Redirect(w, r, scopeOf(r.Context()).url(p), http.StatusSeeOther)
}

type sessionKey struct{}

func withSession(ctx context.Context, s portalSession) context.Context {
	return context.WithValue(ctx, sessionKey{}, s)
}

func sessionOf(ctx context.Context) (portalSession, bool) {
	s, ok := ctx.Value(sessionKey{}).(portalSession)
	return s, ok
}
