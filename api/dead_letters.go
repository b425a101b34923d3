package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// listDeadLetters serves GET /v1/dead-letters?endpoint_id=&event_type=&since=&until=,
// newest first; replayed dead letters stay listed with replayed_at.
func (s *Server) listDeadLetters(c *call) (int, any, error) {
	page, err := pageOf(c.r)
	if err != nil {
		return 0, nil, err
	}
	q := c.r.URL.Query()
	f := storage.DeadLetterFilter{EndpointID: q.Get("endpoint_id"), EventType: q.Get("event_type")}
	if f.Since, err = queryTime(q, "since"); err != nil {
		return 0, nil, err
	}
	if f.Until, err = queryTime(q, "until"); err != nil {
		return 0, nil, err
	}
	list, more, err := c.store.ListDeadLetters(c.ctx, c.project.ID, f, page)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, pageOut(list, more, deadLetterOut, func(v webhookd.DeadLetter) string { return v.ID }), nil
}

// replayDeadLetters serves POST /v1/dead-letters/replay: it takes the list's
// filter as a flat object, {"endpoint_id"?,"event_type"?,"since"?,"until"?}
// (an empty body selects every dead letter), creates a queued replay job
// and answers 202 {"job_id"}. The job is enqueued once the response is
// committed; if that fails, the job runner's reconciler finds it queued.
func (s *Server) replayDeadLetters(c *call) (int, any, error) {
	var f storage.DeadLetterFilter
	var since, until *string
	body := c.body
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	_, err := decodeObject(body, "", map[string]any{"endpoint_id": &f.EndpointID, "event_type": &f.EventType,
		"since": &since, "until": &until})
	if err != nil {
		return 0, nil, err
	}
	if since != nil {
		if f.Since, err = parseTime("since", *since); err != nil {
			return 0, nil, err
		}
	}
	if until != nil {
		if f.Until, err = parseTime("until", *until); err != nil {
			return 0, nil, err
		}
	}
	if f.Since != nil && f.Until != nil && !f.Until.After(*f.Since) {
		return 0, nil, webhookd.Invalid("until", "must be after since")
	}
	job, err := c.store.CreateJob(c.ctx, c.project.ID, f, s.clock.Now())
	if err != nil {
		return 0, nil, err
	}
	c.afterCommit = s.enqueueJobAfterCommit(job.ID)
	return http.StatusAccepted, jobCreatedJSON{JobID: job.ID}, nil
}

// enqueueJobAfterCommit is the afterCommit of a call that created replay
// job id: it enqueues the job (one that cannot be enqueued waits, queued,
// for the job reconciler).
func (s *Server) enqueueJobAfterCommit(id string) func(context.Context) {
	return func(ctx context.Context) {
		if s.cfg.Enqueuer == nil {
			return
		}
		if err := s.cfg.Enqueuer.EnqueueJob(ctx, id); err != nil {
			s.log.WarnContext(ctx, "enqueue replay job failed; it waits queued for the job reconciler", "job_id", id, "err", err)
		}
	}
}
