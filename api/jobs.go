package api

import (
	"bufio"
	"encoding/json"
	"net/http"
)

// getJob serves GET /v1/jobs/{id}: a background job's progress.
func (s *Server) getJob(c *call) (int, any, error) {
	j, err := c.store.GetJob(c.ctx, c.project.ID, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, jobOut(j), nil
}

// cancelJob serves POST /v1/jobs/{id}/cancel: a queued or running job
// ends canceled at once, and a bulk job accepts no line after the answer
// (storage.CancelJob); a finished job is answered unchanged.
func (s *Server) cancelJob(c *call) (int, any, error) {
	j, err := c.store.CancelJob(c.ctx, c.project.ID, c.r.PathValue("id"), s.clock.Now())
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, jobOut(j), nil
}

// jobErrorsPage is how many refused lines GET /v1/jobs/{id}/errors reads
// at a time.
const jobErrorsPage = 1000

type jobErrorJSON struct {
	Line    int     `json:"line"`
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Field   *string `json:"field"`
}

// getJobErrors serves GET /v1/jobs/{id}/errors: a bulk job's refused lines
// in line order, as NDJSON {"line","code","message","field"}, read and
// written a page at a time. Another kind of job has none.
func (s *Server) getJobErrors(w http.ResponseWriter, r *http.Request, c *call) {
	store := s.db.Store()
	id := r.PathValue("id")
	page, err := store.JobErrors(c.ctx, c.project.ID, id, 0, jobErrorsPage)
	if err != nil {
		s.fail(w, c, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	out := bufio.NewWriter(w)
	enc := json.NewEncoder(out)
	for {
		for _, e := range page {
			v := jobErrorJSON{Line: e.Line, Code: e.Code, Message: e.Message}
			if e.Field != "" {
				v.Field = &e.Field
			}
			if err := enc.Encode(v); err != nil {
				return // the client went away
			}
		}
		if len(page) < jobErrorsPage {
			break
		}
		if page, err = store.JobErrors(c.ctx, c.project.ID, id, page[len(page)-1].Line, jobErrorsPage); err != nil {
			// The status is out: end the body short, which the client sees.
			s.log.ErrorContext(c.ctx, "job errors: read failed mid-answer", "job_id", id, "err", err)
			panic(http.ErrAbortHandler)
		}
	}
	out.Flush()
}
