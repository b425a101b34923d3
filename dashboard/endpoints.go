package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// testEventData is the data of a test event sent from the dashboard, as
// the API's POST /v1/endpoints/{id}/test sends when given none.
var testEventData = json.RawMessage(`{"message":"This is a test event from webhookd"}`)

// endpointFlash is what the endpoints page says after an action, by the
// outcome its redirect names (only these fixed texts are ever shown).
var endpointFlash = map[string]struct{ text, kind string }{
	"enabled":             {"Endpoint enabled: it gets new deliveries again.", "ok"},
	"disabled":            {"Endpoint disabled: it gets no new deliveries, and those already scheduled become dead letters (endpoint_disabled) when their turn comes.", "ok"},
	"replay_refused":      {"The endpoint was enabled already: nothing was replayed. Replay its dead letters from the Dead letters page.", "error"},
	"test_disabled":       {"The endpoint is disabled: enable it to send a test event.", "error"},
	"max_in_flight":       {"Max in flight changed: each worker's limit for the endpoint adapts up to it.", "ok"},
	"bad_max_in_flight":   {"Max in flight must be a whole number from 1 to 1000.", "error"},
	webhookd.CodeNotFound: {"No such endpoint (it may have been deleted).", "error"},
}

// endpointsPage lists the live endpoints of the scope, newest first, a page
// at a time.
func (s *Server) endpointsPage(w http.ResponseWriter, r *http.Request) {
	s.renderEndpoints(w, r, http.StatusOK, endpointFormView{})
}

// renderEndpoints renders the endpoints page with status, and the form that
// adds an endpoint as f holds it.
func (s *Server) renderEndpoints(w http.ResponseWriter, r *http.Request, status int, f endpointFormView) {
	q := r.URL.Query()
	sc := scopeOf(r.Context())
	v := endpointsView{Now: s.cfg.Clock.Now(), Form: f}
	if f, ok := endpointFlash[q.Get("done")]; ok {
		v.Flash, v.FlashKind = f.text, f.kind
	}
	cursor := strings.TrimSpace(q.Get("cursor"))
	if cursor != "" && !strings.HasPrefix(cursor, "ep_") {
		cursor = ""
	}
	rows, more, err := s.store.DashboardEndpoints(r.Context(), sc.ProjectID, v.Now.Add(-24*time.Hour),
		storage.Page{Limit: s.cfg.PageSize, Cursor: cursor})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v.Rows = rows
	if more {
		v.NextURL = "/endpoints?" + url.Values{"cursor": {rows[len(rows)-1].ID}}.Encode()
	}
	if cursor != "" {
		v.FirstURL = "/endpoints"
	}
	if sc.portal() {
		if v.Form.Catalog, err = s.catalog(r.Context(), sc.ProjectID); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	s.render(w, r, status, endpointsList(v))
}

// endpointOf returns the live endpoint the path names, if the scope may
// see it. Else the operator goes back to the list, which says it is gone;
// a portal gets a 404, for an endpoint of another project as for one
// deleted.
func (s *Server) endpointOf(w http.ResponseWriter, r *http.Request) (webhookd.Endpoint, bool) {
	ep, err := s.store.DashboardEndpoint(r.Context(), r.PathValue("id"))
	if err == nil && !scopeOf(r.Context()).owns(ep.ProjectID) {
		err = webhookd.ErrNotFound
	}
	if webhookd.ErrorCode(err) == webhookd.CodeNotFound {
		if scopeOf(r.Context()).portal() { // SPEC §5b: another project's id is a 404
			s.render(w, r, http.StatusNotFound, errorPage("Not found", "No such endpoint (it may have been deleted)."))
			return ep, false
		}
		redirect(w, r, "/endpoints?done="+webhookd.CodeNotFound)
		return ep, false
	}
	if err != nil {
		s.fail(w, r, err)
		return ep, false
	}
	return ep, true
}

// setEndpointStatus enables or disables an endpoint, as PATCH
// /v1/endpoints/{id} with status does (disabling by hand: reason manual).
func (s *Server) setEndpointStatus(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	status := r.PostFormValue("status")
	if status != webhookd.EndpointActive && status != webhookd.EndpointDisabled {
		s.render(w, r, http.StatusBadRequest, errorPage("Bad request", "Unknown endpoint status."))
		return
	}
	done := "enabled"
	if status == webhookd.EndpointDisabled {
		done = "disabled"
	}
	replay := status == webhookd.EndpointActive && r.PostFormValue("replay_dead_letters") != ""
	s.patchEndpointThen(w, r, storage.EndpointPatch{Status: &status, ReplayDeadLetters: replay}, done)
}

// patchEndpointThen applies p to the endpoint the path names and goes back to
// the list saying done (or that the endpoint is gone); when p replays the
// outage's dead letters, it enqueues the job and shows its progress.
func (s *Server) patchEndpointThen(w http.ResponseWriter, r *http.Request, p storage.EndpointPatch, done string) {
	ep, ok := s.endpointOf(w, r)
	if !ok {
		return
	}
	_, job, err := s.store.UpdateEndpointAndReplay(r.Context(), ep.ProjectID, ep.ID, p, s.cfg.Clock.Now())
	switch code := webhookd.ErrorCode(err); {
	case code == webhookd.CodeNotFound:
		redirect(w, r, "/endpoints?done="+webhookd.CodeNotFound)
		return
	case code == webhookd.CodeValidationFailed: // a replay asked of an endpoint enabled meanwhile
		redirect(w, r, "/endpoints?done=replay_refused")
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	if job == nil {
		redirect(w, r, "/endpoints?done="+done)
		return
	}
	if s.cfg.Enqueuer != nil {
		if err := s.cfg.Enqueuer.EnqueueJob(context.WithoutCancel(r.Context()), job.ID); err != nil {
			s.log.Warn("enqueue replay job failed; it waits queued for the job reconciler", "job_id", job.ID, "err", err)
		}
	}
	redirect(w, r, "/jobs?"+url.Values{"id": {job.ID}}.Encode())
}

// setMaxInFlight changes the endpoint's max_in_flight (the ceiling of its
// adaptive limit per worker), as PATCH /v1/endpoints/{id} does; empty
// sets the default.
func (s *Server) setMaxInFlight(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	var m *int
	if v := strings.TrimSpace(r.PostFormValue("max_in_flight")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > webhookd.DefaultMaxInFlight {
			redirect(w, r, "/endpoints?done=bad_max_in_flight")
			return
		}
		m = &n
	}
	s.patchEndpointThen(w, r, storage.EndpointPatch{MaxInFlight: &m}, "max_in_flight")
}

// sendTestEvent sends a webhookd.test event to this endpoint alone, as POST
// /v1/endpoints/{id}/test does, and shows the new delivery.
func (s *Server) sendTestEvent(w http.ResponseWriter, r *http.Request) {
	ep, ok := s.endpointOf(w, r)
	if !ok {
		return
	}
	disabled := func() { redirect(w, r, "/endpoints?done=test_disabled") }
	if ep.Status != webhookd.EndpointActive {
		disabled()
		return
	}
	now := s.cfg.Clock.Now()
	evs, err := s.store.CreateEvents(r.Context(), ep.ProjectID, []storage.NewEvent{{Type: webhookd.TestEventType,
		Data: testEventData, EndpointIDs: []string{ep.ID}, Trigger: webhookd.TriggerTest}}, now, func(int) string { return "" })
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(evs[0].Deliveries) == 0 { // disabled meanwhile
		disabled()
		return
	}
	d := evs[0].Deliveries[0]
	if s.cfg.Enqueuer != nil {
		due := webhookd.ScheduledDelivery{ID: d.ID, EndpointID: d.EndpointID, DueAt: now}
		if err := s.cfg.Enqueuer.Enqueue(context.WithoutCancel(r.Context()), due); err != nil {
			s.log.Warn("enqueue test event failed; the reconciler will pick the delivery up", "delivery_id", d.ID, "err", err)
		}
	}
	redirect(w, r, deliveryPath(d.ID))
}

// revealSecret shows the endpoint's signing secrets, as GET
// /v1/endpoints/{id}/secret does; a POST, so only an explicit click shows
// them.
func (s *Server) revealSecret(w http.ResponseWriter, r *http.Request) {
	ep, ok := s.endpointOf(w, r)
	if !ok {
		return
	}
	s.render(w, r, http.StatusOK, secretPage(s.secretView(ep, false)))
}

// rotateSecret makes a new signing secret, as POST
// /v1/endpoints/{id}/rotate-secret does: the old one keeps signing for
// storage.SecretOverlap.
func (s *Server) rotateSecret(w http.ResponseWriter, r *http.Request) {
	ep, ok := s.endpointOf(w, r)
	if !ok {
		return
	}
	secret, err := newSecret()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ep, err = s.store.RotateSecret(r.Context(), ep.ProjectID, ep.ID, secret, s.cfg.Clock.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, secretPage(s.secretView(ep, true)))
}

func (s *Server) secretView(ep webhookd.Endpoint, rotated bool) secretView {
	v := secretView{E: ep, Rotated: rotated}
	if ep.PreviousSecret != nil && ep.PreviousExpiresAt != nil && ep.PreviousExpiresAt.After(s.cfg.Clock.Now()) {
		v.Previous, v.PreviousExpiresAt = *ep.PreviousSecret, ep.PreviousExpiresAt
	}
	if rotated && v.PreviousExpiresAt == nil { // cannot happen after a rotation; keep the page whole anyway
		v.Rotated = false
	}
	return v
}

// newSecret returns whsec_ + base64 of 32 random bytes, as the API makes.
func newSecret() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(raw), nil
}
