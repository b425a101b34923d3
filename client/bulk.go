package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"
)

// Bulk hands events to the API as one background job (POST
// /v1/events/bulk, SPEC §2 "Bulk jobs"): they are written as NDJSON while
// the request streams, never all held in memory, and the job's id comes
// back once the API has stored them all. Follow the job with WaitJob, and
// list the lines it refused with JobErrors (line i is the i-th event).
//
// The events are read once, so Bulk makes one try: on a temporary error
// (429, 5xx, a network error) call it again with the same events and the
// same WithIdempotencyKey, and the API answers with the job the first try
// made, if it made one. Errors: ErrInvalidJSON naming a line,
// ErrPayloadTooLarge (over 100,000 events or 64 MiB by default),
// ErrIdempotencyKeyMismatch, and the rest of the API's codes.
func (c *Client) Bulk(ctx context.Context, events iter.Seq[NewEvent], opts ...CallOption) (string, error) {
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 64<<10)
		enc := json.NewEncoder(w) // one value and "\n" per event
		for ev := range events {
			if err := enc.Encode(ev); err != nil {
				pw.CloseWithError(fmt.Errorf("webhookd client: encode event: %w", err))
				return
			}
		}
		pw.CloseWithError(w.Flush())
	}()
	defer pr.Close() // stops the writer when the request ends early
	return c.BulkNDJSON(ctx, pr, opts...)
}

// BulkNDJSON is Bulk for a body that is NDJSON already (one event object
// per line), read from r as the request streams.
func (c *Client) BulkNDJSON(ctx context.Context, r io.Reader, opts ...CallOption) (string, error) {
	rq := newRequest(http.MethodPost, "/v1/events/bulk", opts)
	if rq.idempotencyKey == "" {
		rq.idempotencyKey = uuid.NewString()
	}
	u := *c.base
	u.Path = c.base.Path + rq.path
	req, err := http.NewRequestWithContext(ctx, rq.method, u.String(), r)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Idempotency-Key", rq.idempotencyKey)
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("webhookd client: POST %s: %w", rq.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return "", fmt.Errorf("webhookd client: POST %s: %w", rq.path, err)
	}
	if resp.StatusCode >= 300 {
		return "", errorFromResponse(resp, body, 1)
	}
	var out struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.JobID == "" {
		return "", fmt.Errorf("webhookd client: POST %s: a %d answer without a job id: %q", rq.path, resp.StatusCode, body)
	}
	return out.JobID, nil
}

// JobError is a line a bulk job refused: its 1-based number, and the error
// the single event route would have answered for it.
type JobError struct {
	Line    int    `json:"line"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"` // "" when the error names none
}

// JobErrors lists the lines a bulk job refused so far, in line order (GET
// /v1/jobs/{id}/errors); ErrNotFound for another project's job.
func (c *Client) JobErrors(ctx context.Context, id string) ([]JobError, error) {
	rq := newRequest("GET", "/v1/jobs/"+url.PathEscape(id)+"/errors", nil)
	var last *Error
	for attempt := 1; ; attempt++ {
		resp, body, err := c.send(ctx, rq)
		if err == nil && resp.StatusCode < 300 {
			return decodeJobErrors(body)
		}
		if err == nil {
			last = errorFromResponse(resp, body, attempt)
			err = last
		}
		if attempt >= c.retry.MaxAttempts || (last != nil && !last.Temporary()) || ctx.Err() != nil {
			return nil, c.gaveUp(rq, attempt, err, last)
		}
		t := time.NewTimer(c.retry.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, c.stopped(rq, ctx.Err(), last)
		case <-t.C:
		}
	}
}

func decodeJobErrors(body []byte) ([]JobError, error) {
	var out []JobError
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e JobError
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("webhookd client: job errors: %w", err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// CancelJob stops a queued or running job (POST /v1/jobs/{id}/cancel) and
// returns it: canceled, or unchanged when it had finished already. A bulk
// job accepts no line after the answer; what it did stays done.
func (c *Client) CancelJob(ctx context.Context, id string, opts ...CallOption) (*Job, error) {
	r, err := post("/v1/jobs/"+url.PathEscape(id)+"/cancel", nil, opts)
	if err != nil {
		return nil, err
	}
	var out Job
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WaitJob follows a job until it is finished (succeeded, failed or
// canceled) and returns it, reading it every interval (1 s when 0) and
// calling progress, when not nil, with each reading whose counts or status
// changed, the last one included. It stops early with ctx's error.
func (c *Client) WaitJob(ctx context.Context, id string, interval time.Duration, progress func(Job)) (*Job, error) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var seen *Job
	for {
		j, err := c.Job(ctx, id)
		if err != nil {
			return nil, err
		}
		if progress != nil && (seen == nil || seen.Status != j.Status || seen.Done != j.Done ||
			seen.FailedCount != j.FailedCount || seen.Total != j.Total) {
			progress(*j)
		}
		if j.Finished() {
			return j, nil
		}
		seen = j
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("webhookd client: wait for job %s: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}
