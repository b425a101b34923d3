package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/a-h/templ"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// render writes c with status, or a plain 500 when it fails to render (the
// page is rendered whole first, so a failure never leaves half a page).
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	var b bytes.Buffer
	if err := c.Render(r.Context(), &b); err != nil {
		s.log.Error("dashboard: render failed", "path", r.URL.Path, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// fail shows an error page: not_found as 404, anything else as a logged 500.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, webhookd.ErrNotFound) {
		s.render(w, r, http.StatusNotFound, errorPage("Not found", "No such delivery in the database (it may have been purged after the retention period)."))
		return
	}
	s.log.Error("dashboard: request failed", "path", r.URL.Path, "err", err)
	s.render(w, r, http.StatusInternalServerError, errorPage("Something went wrong", "The request failed; the server log says why."))
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if s.sessions.valid(r, s.cfg.Clock.Now()) {
		http.Redirect(w, r, localPath(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, loginForm(localPath(r.URL.Query().Get("next")), ""))
}

// login checks the admin token. A client that failed too often lately is
// refused before the token is compared.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	now, ip := s.cfg.Clock.Now(), clientIP(r)
	next := localPath(r.PostFormValue("next"))
	if wait := s.limiter.wait(ip, now); wait > 0 {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		s.render(w, r, http.StatusTooManyRequests, loginForm(next,
			fmt.Sprintf("Too many failed logins from your address: try again in %d s.", secs)))
		return
	}
	if !s.sessions.tokenMatches(r.PostFormValue("token")) {
		s.limiter.failed(ip, now)
		s.log.Warn("dashboard: failed login", "client_ip", ip)
		s.render(w, r, http.StatusUnauthorized, loginForm(next, "That is not the admin token."))
		return
	}
	s.sessions.issue(w, r, now)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	s.sessions.revoke(w, r, s.cfg.Clock.Now())
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// deliveriesPage serves the landing page: the deliveries of the window,
// newest first, a page at a time after ?cursor= (the last id seen).
func (s *Server) deliveriesPage(w http.ResponseWriter, r *http.Request) {
	now := s.cfg.Clock.Now()
	q := r.URL.Query()
	v := deliveriesView{Filter: filterOf(q), Now: now, Window: windowText(s.cfg.Window)}
	cursor := strings.TrimSpace(q.Get("cursor"))
	if cursor != "" && !strings.HasPrefix(cursor, "dlv_") {
		v.Error, cursor = "That page link is not valid; showing the newest deliveries.", ""
	}
	status := http.StatusOK
	if msg := v.Filter.validate(); msg != "" {
		v.Error, status = msg, http.StatusBadRequest
	}
	sc := scopeOf(r.Context())
	var err error
	if sc.portal() {
		v.Filter.Project = "" // a portal sees its own project only
	} else if v.Projects, err = s.store.DashboardProjects(r.Context()); err != nil {
		s.fail(w, r, err)
		return
	}
	if status == http.StatusOK {
		project := v.Filter.Project
		if sc.portal() {
			project = sc.ProjectID
		}
		f := storage.DashboardFilter{Status: v.Filter.Status, ProjectID: project, EndpointID: v.Filter.Endpoint,
			EventType: v.Filter.EventType, EventID: v.Filter.EventID, DeliveryID: v.Filter.DeliveryID,
			Since: now.Add(-s.cfg.Window)}
		var more bool
		v.Rows, more, err = s.store.DashboardDeliveries(r.Context(), f, storage.Page{Limit: s.cfg.PageSize, Cursor: cursor})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if more {
			v.NextURL = v.Filter.query(v.Rows[len(v.Rows)-1].ID)
		}
	}
	if cursor != "" {
		v.FirstURL = v.Filter.query("")
	} else if o, err := s.overview(r.Context(), sc, now); err != nil {
		s.log.Error("dashboard: overview failed; the page goes without its chart", "err", err)
	} else {
		c := newChart(o, windowText(s.cfg.ChartWindow))
		v.Chart = &c
	}
	s.render(w, r, status, deliveriesList(v))
}

// overview is the chart's data: every project's, or the portal's own.
func (s *Server) overview(ctx context.Context, sc scope, now time.Time) (storage.Overview, error) {
	if sc.portal() {
		return s.store.ProjectOverview(ctx, sc.ProjectID, now, s.cfg.ChartWindow)
	}
	return s.store.Overview(ctx, now, s.cfg.ChartWindow, s.cfg.ChartSettle)
}

// deliveryOf returns the delivery the path names, with its attempts, when
// the scope may see it; else not_found.
func (s *Server) deliveryOf(r *http.Request) (storage.DeliveryDetail, error) {
	d, err := s.store.DashboardDelivery(r.Context(), r.PathValue("id"))
	if err == nil && !scopeOf(r.Context()).owns(d.ProjectID) {
		return storage.DeliveryDetail{}, webhookd.ErrNotFound
	}
	return d, err
}

// windowText says how far back the deliveries page looks.
func windowText(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%d days", int(d.Hours()/24))
	}
	return fmt.Sprintf("%d hours", int(d.Hours()))
}

// redeliveryFlash is what the delivery page says after a Redeliver, by the
// outcome the redirect names (only these fixed texts are ever shown).
var redeliveryFlash = map[string]struct{ text, kind string }{
	"requested":                   {"Redelivery requested: one manual attempt is on its way, with a new request id. It appears below once made.", "ok"},
	webhookd.CodeEndpointDisabled: {"endpoint_disabled: the delivery's endpoint is disabled or deleted. Enable it, then redeliver.", "error"},
	webhookd.CodeInternal:         {"The redelivery could not be recorded; the server log says why. Try again.", "error"},
}

// deliveryPage shows one delivery with its payload and attempts.
func (s *Server) deliveryPage(w http.ResponseWriter, r *http.Request) {
	d, err := s.deliveryOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := deliveryView{D: d, Payload: prettyJSON(d.EventData), Now: s.cfg.Clock.Now(),
		CanInspect: s.cfg.Inspector != nil && !scopeOf(r.Context()).portal()}
	if f, ok := redeliveryFlash[r.URL.Query().Get("redelivery")]; ok {
		v.Flash, v.FlashKind = f.text, f.kind
	}
	s.render(w, r, http.StatusOK, deliveryDetail(v))
}

// redeliver asks for one manual attempt of a delivery, exactly as POST
// /v1/deliveries/{id}/redeliver does: the request is recorded in PostgreSQL,
// then enqueued; an enqueue that fails is only logged, since the reconciler
// enqueues recorded requests again. It answers 303 to the delivery's page,
// which says what happened.
func (s *Server) redeliver(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	d, err := s.deliveryOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	outcome := "requested"
	if err := s.requestRedelivery(ctx, d.ProjectID, id); err != nil {
		outcome = webhookd.ErrorCode(err)
		if outcome == webhookd.CodeNotFound {
			s.fail(w, r, err)
			return
		}
		if outcome != webhookd.CodeEndpointDisabled {
			s.log.Error("dashboard: redelivery failed", "delivery_id", id, "err", err)
			outcome = webhookd.CodeInternal
		}
	}
	redirect(w, r, deliveryPath(id)+"?redelivery="+outcome)
}

// requestRedelivery asks for one manual attempt of a delivery as the API
// does, recorded as asked for by the scope's actor (dashboard or portal): recorded in PostgreSQL (endpoint_disabled, not_found refused), then
// enqueued; an enqueue that fails is only logged, since the reconciler
// enqueues recorded requests again.
func (s *Server) requestRedelivery(ctx context.Context, projectID, deliveryID string) error {
	requestID, by := storage.NewRequestID(), scopeOf(ctx).actor()
	if _, err := s.store.RequestRedelivery(ctx, projectID, deliveryID, requestID, by); err != nil {
		return err
	}
	if s.cfg.Enqueuer != nil {
		if err := s.cfg.Enqueuer.EnqueueManual(context.WithoutCancel(ctx), requestID, deliveryID, by); err != nil {
			s.log.Warn("enqueue redelivery failed; the reconciler will pick it up", "delivery_id", deliveryID, "err", err)
		}
	}
	return nil
}
