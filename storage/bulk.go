package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// BulkUpload is an event_bulk job being created (POST /v1/events/bulk): its
// body goes into bulk_chunks a chunk at a time, inside one transaction that
// opens with the first chunk, and Commit creates the job with its
// Idempotency-Key's record. Until then nothing is visible; Rollback, or a
// refused body, leaves nothing stored. Only the chunk in hand is in memory.
type BulkUpload struct {
	db        *DB
	projectID string
	now       time.Time
	tx        pgx.Tx
	jobID     string
}

// NewBulkUpload starts the upload of a bulk job of the project made at
// now. It holds no connection until the first chunk.
func (db *DB) NewBulkUpload(projectID string, now time.Time) *BulkUpload {
	return &BulkUpload{db: db, projectID: projectID, now: now}
}

// AddChunk stores lineCount lines of the body, the first numbered
// firstLine (1-based), as body holds them. The first call begins the
// transaction and inserts the job, queued.
func (u *BulkUpload) AddChunk(ctx context.Context, firstLine, lineCount int, body []byte) error {
	if u.tx == nil {
		tx, err := u.db.pool.Begin(ctx)
		if err != nil {
			return fmt.Errorf("bulk upload: begin: %w", err)
		}
		u.tx, u.jobID = tx, newID(prefixJob)
		if _, err := tx.Exec(ctx, `INSERT INTO jobs (id, project_id, kind, status, created_at) VALUES ($1, $2, $3, 'queued', $4)`,
			u.jobID, u.projectID, webhookd.JobEventBulk, u.now); err != nil {
			return fmt.Errorf("bulk upload: job: %w", err)
		}
	}
	if _, err := u.tx.Exec(ctx, `INSERT INTO bulk_chunks (job_id, first_line, line_count, body) VALUES ($1, $2, $3, $4)`,
		u.jobID, firstLine, lineCount, body); err != nil {
		return fmt.Errorf("bulk upload: chunk: %w", err)
	}
	return nil
}

// Rollback drops whatever the upload stored. It is a no-op after Commit.
func (u *BulkUpload) Rollback(ctx context.Context) {
	if u.tx != nil {
		u.tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // nothing to do about it: the connection goes
	}
}

// Commit sets the job's total (the events of the body), claims the key k
// (whose Fingerprint covers the whole body) and stores the response render
// makes of the job's id, all in the upload's transaction. A key whose
// record is stored answers instead (replayed, or idempotency_key_mismatch),
// and the upload is dropped; a key another request holds is claimed again
// until wait has passed, then idempotency_key_in_progress. At least one
// chunk must have been added.
func (u *BulkUpload) Commit(ctx context.Context, k IdempotencyKey, total int, wait time.Duration,
	render func(jobID string) (StoredResponse, error)) (resp StoredResponse, replayed bool, err error) {
	if u.tx == nil {
		return StoredResponse{}, false, errors.New("bulk upload: commit without a chunk")
	}
	defer u.Rollback(ctx)
	deadline := time.Now().Add(wait)
	for pause := time.Duration(0); ; pause = nextPause(pause) {
		var (
			c        claimResult
			fp, body []byte
			status   *int32
			ctype    *string
		)
		// The claim is its own statement, so a key another request holds
		// can be asked again in this transaction once it commits.
		err = u.tx.QueryRow(ctx, claimKey, k.ProjectID, k.Key, k.Fingerprint[:], u.now, u.now.Add(k.TTL)).
			Scan(&c.state, &fp, &status, &ctype, &body)
		if err != nil {
			return StoredResponse{}, false, fmt.Errorf("claim idempotency key: %w", err)
		}
		switch c.state {
		case claimStored:
			u.db.setStored(&c, fp, *status, *ctype, body)
			resp, err := c.replay(k)
			return resp, err == nil, err
		case claimBusy, claimRaced:
			if !sleepUntil(ctx, pause, deadline) {
				if ctx.Err() != nil {
					return StoredResponse{}, false, ctx.Err()
				}
				return StoredResponse{}, false, errKeyInProgress()
			}
			continue
		}
		break
	}
	if _, err := u.tx.Exec(ctx, `UPDATE jobs SET total = $2 WHERE id = $1`, u.jobID, total); err != nil {
		return StoredResponse{}, false, fmt.Errorf("bulk upload: total: %w", err)
	}
	if resp, err = render(u.jobID); err != nil {
		return StoredResponse{}, false, err
	}
	var rec storedResponses
	rec.add(k, u.now, resp, u.db.box)
	if _, err := u.tx.Exec(ctx, storeResponses, rec.args()...); err != nil {
		return StoredResponse{}, false, fmt.Errorf("store idempotent response: %w", err)
	}
	if err := u.tx.Commit(ctx); err != nil {
		return StoredResponse{}, false, fmt.Errorf("bulk upload: commit: %w", err)
	}
	return resp, false, nil
}

// BulkChunk is a stored chunk of a bulk job's body.
type BulkChunk struct {
	FirstLine int    // the 1-based number of its first line
	LineCount int    // its lines, blank ones included
	Body      []byte // the lines, each ended by "\n"
}

// NextBulkChunk returns the first chunk of j's body holding a line after
// j's CursorLine; ok is false when none is left.
func (s *Store) NextBulkChunk(ctx context.Context, j *ClaimedJob) (c BulkChunk, ok bool, err error) {
	err = s.q.QueryRow(ctx, `SELECT first_line, line_count, body FROM bulk_chunks
		WHERE job_id = $1 AND first_line + line_count - 1 > $2 ORDER BY first_line LIMIT 1`, j.ID, j.CursorLine).
		Scan(&c.FirstLine, &c.LineCount, &c.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("bulk chunk: %w", err)
	}
	return c, true, nil
}

// BulkLine is a line of a bulk job's body, read: the event it holds, or
// why it is refused before anything is written (its shape, its schema).
type BulkLine struct {
	Line  int // 1-based
	Event NewEvent
	Err   error
}

// AcceptBulkLines accepts lines of j, in order, through the event write
// path every event request takes (ingestGroup: endpoints matched, external
// ids honoured, deliveries fanned out), and in the same transaction adds
// the accepted ones to j's done, the refused ones (an Err of their own,
// an unknown endpoint id, an external id taken before or by an earlier
// line, even one refused otherwise) to its failed_count and its
// errors, moves its CursorLine to through (the last line the lines cover,
// blank ones included) and renews its lease from now. The transaction
// first locks the job's row and goes on only while the job runs under
// j's lease: ErrJobCanceled once it is canceled (CancelJob waits for this
// lock), ErrJobLeased once another runner holds it; either way nothing is
// written. It returns the events accepted, for their deliveries to be
// enqueued after the commit.
func (s *Store) AcceptBulkLines(ctx context.Context, j *ClaimedJob, lines []BulkLine, through int, now time.Time) ([]webhookd.Event, error) {
	// Read the project's endpoints before the transaction holds a
	// connection, so that it need not wait for a second one.
	if _, err := s.db.endpoints(ctx, s.db.pool, []string{j.ProjectID}); err != nil {
		return nil, fmt.Errorf("bulk lines: read endpoints: %w", err)
	}
	tx, err := s.db.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("bulk lines: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	var (
		status string
		until  *time.Time
	)
	if err := tx.QueryRow(ctx, `SELECT status, locked_until FROM jobs WHERE id = $1 FOR UPDATE`, j.ID).Scan(&status, &until); err != nil {
		return nil, translate(err, "bulk lines: job")
	}
	switch {
	case status == webhookd.JobCanceled:
		return nil, ErrJobCanceled
	case status != webhookd.JobRunning || until == nil || !until.Equal(j.until):
		return nil, ErrJobLeased
	}
	calls := make([]*ingestCall, len(lines))
	var pending []*ingestCall
	seen := map[string]int{} // external id → the line that has it first
	for i := range lines {
		l := &lines[i]
		if l.Err != nil {
			continue
		}
		// A repeat of an earlier line's external id is refused here, as
		// the group would refuse it (taken by that line), but at once
		// rather than one repeat a round.
		if x := l.Event.ExternalID; x != nil {
			if first, dup := seen[*x]; dup {
				l.Err = &webhookd.Error{Code: webhookd.CodeExternalIDTaken, Field: "external_id",
					Message: fmt.Sprintf("line %d has external_id %q already", first, *x)}
				continue
			}
			seen[*x] = l.Line
		}
		calls[i] = &ingestCall{req: IngestRequest{Key: IdempotencyKey{ProjectID: j.ProjectID}, Events: []NewEvent{l.Event},
			Now: now, FieldPrefix: func(int) string { return "" }}, k: ikey{project: j.ProjectID}}
		pending = append(pending, calls[i])
	}
	// A line goes again when its group found its external id taken (the
	// next round refuses it) or the endpoints changed: at most
	// maxGroupTries rounds, in this transaction.
	for try := 0; len(pending) > 0; try++ {
		if try == maxGroupTries {
			return nil, errors.New("bulk lines: the endpoints kept changing")
		}
		for _, c := range pending {
			c.retry = retryNone
		}
		if err := s.db.ingestGroup(ctx, tx, pending, 0, func() {}); err != nil {
			return nil, translate(err, "bulk lines")
		}
		var again []*ingestCall
		for _, c := range pending {
			if c.retry != retryNone {
				again = append(again, c)
			}
		}
		pending = again
	}
	var (
		accepted []webhookd.Event
		errs     struct {
			lines                  []int32
			codes, messages, field []string
		}
	)
	for i, l := range lines {
		why := l.Err
		if c := calls[i]; c != nil {
			if why = c.err; why == nil {
				accepted = append(accepted, c.res.Events...)
				continue
			}
		}
		e := lineError(why)
		errs.lines, errs.codes = append(errs.lines, int32(l.Line)), append(errs.codes, e.Code)
		errs.messages, errs.field = append(errs.messages, e.Message), append(errs.field, e.Field)
	}
	if len(errs.lines) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO job_errors (job_id, line, code, message, field)
			SELECT $1, l, c, m, nullif(f, '') FROM unnest($2::int4[], $3::text[], $4::text[], $5::text[]) AS t(l, c, m, f)`,
			j.ID, errs.lines, errs.codes, errs.messages, errs.field); err != nil {
			return nil, fmt.Errorf("bulk lines: errors: %w", err)
		}
	}
	next := leaseEnd(now, j.lease)
	if err := tx.QueryRow(ctx, `UPDATE jobs SET done = done + $2, failed_count = failed_count + $3, cursor_line = $4,
			locked_until = $5 WHERE id = $1 RETURNING done, failed_count`,
		j.ID, len(accepted), len(errs.lines), through, next).Scan(&j.Done, &j.FailedCount); err != nil {
		return nil, fmt.Errorf("bulk lines: progress: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("bulk lines: commit: %w", err)
	}
	j.until, j.CursorLine = next, through
	return accepted, nil
}

// lineError is a refused line's error as job_errors lists it: a client
// error as the single event route would answer it (a taken external id
// names external_id), anything else internal.
func lineError(err error) webhookd.Error {
	var e *webhookd.Error
	if !errors.As(err, &e) {
		return webhookd.Error{Code: webhookd.CodeInternal, Message: "the line could not be read"}
	}
	out := *e
	if out.Code == webhookd.CodeExternalIDTaken && out.Field == "" {
		out.Field = "external_id"
	}
	return out
}

// JobErrors returns up to limit refused lines of one of the project's jobs
// after line after, in line order; ErrNotFound for an unknown job.
func (s *Store) JobErrors(ctx context.Context, projectID, jobID string, after, limit int) ([]webhookd.JobError, error) {
	rows, err := s.q.Query(ctx, `SELECT e.line, e.code, e.message, coalesce(e.field, '')
		FROM jobs j LEFT JOIN LATERAL (SELECT * FROM job_errors WHERE job_id = j.id AND line > $3 ORDER BY line LIMIT $4) e ON true
		WHERE j.id = $1 AND j.project_id = $2`, jobID, projectID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("job errors: %w", err)
	}
	var (
		out   []webhookd.JobError
		found bool
	)
	var (
		line          *int
		code, message *string
		field         string
	)
	_, err = pgx.ForEachRow(rows, []any{&line, &code, &message, &field}, func() error {
		found = true
		if line != nil {
			out = append(out, webhookd.JobError{Line: *line, Code: *code, Message: *message, Field: field})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("job errors: %w", err)
	}
	if !found {
		return nil, translate(pgx.ErrNoRows, "job")
	}
	return out, nil
}
