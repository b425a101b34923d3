package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// maxSelected caps how many dead letters one "Replay selected" takes.
const maxSelected = 200

// deadLettersPage lists the dead letters of the window, newest first, a
// page at a time after ?cursor=.
func (s *Server) deadLettersPage(w http.ResponseWriter, r *http.Request) {
	now := s.cfg.Clock.Now()
	q := r.URL.Query()
	v := deadLettersView{Filter: deadLetterFilterOf(q.Get), Now: now, Window: windowText(s.cfg.Window)}
	cursor := strings.TrimSpace(q.Get("cursor"))
	if cursor != "" && !strings.HasPrefix(cursor, "dl_") {
		v.Error, cursor = "That page link is not valid; showing the newest dead letters.", ""
	}
	status := http.StatusOK
	if v.Filter.Reason != "" && !slices.Contains(reasons, v.Filter.Reason) {
		v.Error, status = "Unknown reason: choose exhausted, client error, redirect or endpoint disabled.", http.StatusBadRequest
	}
	v.Flash, v.FlashKind = replayFlash(q)
	sc := scopeOf(r.Context())
	var err error
	if sc.portal() {
		v.Filter.Project = ""
	} else if v.Projects, err = s.store.DashboardProjects(r.Context()); err != nil {
		s.fail(w, r, err)
		return
	}
	if status == http.StatusOK {
		var more bool
		v.Rows, more, err = s.store.DashboardDeadLetters(r.Context(), s.deadLetterFilter(sc, v.Filter),
			storage.Page{Limit: s.cfg.PageSize, Cursor: cursor})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if more {
			v.NextURL = v.Filter.query(v.Rows[len(v.Rows)-1].ID, nil)
		}
	}
	if cursor != "" {
		v.FirstURL = v.Filter.query("", nil)
	}
	s.render(w, r, status, deadLettersList(v))
}

// deadLetterFilter is the storage filter of f in the scope: a portal's
// project whatever f says.
func (s *Server) deadLetterFilter(sc scope, f deadLetterFilter) storage.DashboardDeadLetterFilter {
	project := f.Project
	if sc.portal() {
		project = sc.ProjectID
	}
	return storage.DashboardDeadLetterFilter{ProjectID: project, EndpointID: f.Endpoint, EventType: f.EventType,
		Reason: f.Reason, Since: s.cfg.Clock.Now().Add(-s.cfg.Window)}
}

// replayFlash says what the last "Replay selected" did, from the counts its
// redirect carries (numbers only; the texts are fixed).
func replayFlash(q url.Values) (text, kind string) {
	if q.Get("requested") == "" {
		return "", ""
	}
	requested, _ := strconv.Atoi(q.Get("requested"))
	disabled, _ := strconv.Atoi(q.Get("disabled"))
	text = fmt.Sprintf("%d redeliveries requested; each appears in its delivery's history once made, and a dead letter whose redelivery succeeds is marked replayed.", requested)
	kind = "ok"
	if disabled > 0 {
		text += fmt.Sprintf(" %d skipped: endpoint_disabled (enable the endpoint first).", disabled)
		kind = "error"
	}
	if requested == 0 && disabled == 0 {
		text, kind = "Nothing to replay: select dead letters not yet replayed.", "error"
	}
	return text, kind
}

// replayDeadLetters serves both replay buttons. "selected" asks for one
// manual attempt of each selected dead letter's delivery, as Redeliver
// does; "all" starts a dead_letter_replay job per project with matching
// dead letters (the same job as POST /v1/dead-letters/replay) and shows
// their progress.
func (s *Server) replayDeadLetters(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		s.render(w, r, http.StatusBadRequest, errorPage("Bad request", "The form could not be read."))
		return
	}
	f := deadLetterFilterOf(r.PostForm.Get)
	switch r.PostForm.Get("action") {
	case "selected":
		s.replaySelected(w, r, r.PostForm["id"])
	case "all":
		s.replayAll(w, r, f)
	default:
		s.render(w, r, http.StatusBadRequest, errorPage("Bad request", "Unknown replay action."))
	}
}

func (s *Server) replaySelected(w http.ResponseWriter, r *http.Request, ids []string) {
	ctx := r.Context()
	if len(ids) > maxSelected {
		s.render(w, r, http.StatusBadRequest, errorPage("Too many selected",
			fmt.Sprintf("Select at most %d dead letters at once, or use Replay all matching.", maxSelected)))
		return
	}
	refs, err := s.store.DashboardDeadLettersByID(ctx, ids)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sc := scopeOf(ctx)
	for _, d := range refs {
		if !sc.owns(d.ProjectID) {
			s.render(w, r, http.StatusNotFound, errorPage("Not found", "No such dead letter."))
			return
		}
	}
	requested, disabled := 0, 0
	for _, d := range refs {
		if err := s.requestRedelivery(ctx, d.ProjectID, d.DeliveryID); err != nil {
			if webhookd.ErrorCode(err) == webhookd.CodeEndpointDisabled {
				disabled++
				continue
			}
			if webhookd.ErrorCode(err) == webhookd.CodeNotFound { // purged meanwhile
				continue
			}
			s.fail(w, r, err)
			return
		}
		requested++
	}
	back := deadLetterFilterOf(r.PostForm.Get).query("", url.Values{"requested": {strconv.Itoa(requested)},
		"disabled": {strconv.Itoa(disabled)}})
	redirect(w, r, back)
}

func (s *Server) replayAll(w http.ResponseWriter, r *http.Request, f deadLetterFilter) {
	ctx, now := r.Context(), s.cfg.Clock.Now()
	f.Reason = "" // a job cannot select by reason; the button is disabled then
	projects, err := s.store.DeadLetterProjects(ctx, s.deadLetterFilter(scopeOf(ctx), f))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	since := now.Add(-s.cfg.Window)
	jobs := url.Values{}
	for _, p := range projects {
		job, err := s.store.CreateJob(ctx, p, storage.DeadLetterFilter{EndpointID: f.Endpoint, EventType: f.EventType,
			Since: &since}, now)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		jobs.Add("id", job.ID)
		if s.cfg.Enqueuer != nil {
			if err := s.cfg.Enqueuer.EnqueueJob(context.WithoutCancel(ctx), job.ID); err != nil {
				s.log.Warn("enqueue replay job failed; it waits queued for the job reconciler", "job_id", job.ID, "err", err)
			}
		}
	}
	redirect(w, r, "/jobs?"+jobs.Encode())
}

// recentJobs is how many jobs /jobs lists without ?id=.
const recentJobs = 50

// jobs shows the jobs named by ?id= (the replays just started), or
// without one the latest jobs of the scope (bulk jobs and replays), each
// with a progress bar.
func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	ids := r.URL.Query()["id"]
	if len(ids) > 1000 {
		ids = ids[:1000]
	}
	sc := scopeOf(r.Context())
	var (
		jobs []storage.JobRow
		err  error
	)
	if len(ids) == 0 {
		jobs, err = s.store.RecentJobs(r.Context(), sc.ProjectID, recentJobs)
	} else {
		jobs, err = s.store.DashboardJobs(r.Context(), ids)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if slices.ContainsFunc(jobs, func(j storage.JobRow) bool { return !sc.owns(j.ProjectID) }) {
		s.render(w, r, http.StatusNotFound, errorPage("Not found", "No such replay job."))
		return
	}
	v := jobsView{Jobs: jobs, Now: s.cfg.Clock.Now(), Listed: len(ids) == 0}
	for _, j := range jobs {
		if j.FinishedAt == nil {
			v.Running = true
		}
	}
	s.render(w, r, http.StatusOK, jobsPage(v))
}
