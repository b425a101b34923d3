package api

import "net/http"

// getJob serves GET /v1/jobs/{id}: a background job's progress.
func (s *Server) getJob(c *call) (int, any, error) {
	j, err := c.store.GetJob(c.ctx, c.project.ID, c.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, jobOut(j), nil
}
