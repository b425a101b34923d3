package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// Errors of the job runner's methods.
var (
	// ErrJobFinished says the job has succeeded or failed already.
	ErrJobFinished = errors.New("job is finished")
	// ErrJobLeased says another runner holds the job's lease: ClaimJob
	// cannot take it yet, or a holder whose lease ran out lost it.
	ErrJobLeased = errors.New("job is held by another runner")
	// ErrJobCanceled says the job was canceled while a runner held it.
	ErrJobCanceled = errors.New("job is canceled")
)

const jobColumns = `id, project_id, kind, status, total, done, failed_count, created_at, finished_at`

func scanJob(row pgx.Row, more ...any) (webhookd.Job, error) {
	var j webhookd.Job
	err := row.Scan(append([]any{&j.ID, &j.ProjectID, &j.Kind, &j.Status, &j.Total, &j.Done, &j.FailedCount,
		&j.CreatedAt, &j.FinishedAt}, more...)...)
	return j, err
}

// CreateJob stores a queued dead_letter_replay job of the project over the
// dead letters f selects.
func (s *Store) CreateJob(ctx context.Context, projectID string, f DeadLetterFilter, now time.Time) (webhookd.Job, error) {
	params, err := json.Marshal(f)
	if err != nil {
		return webhookd.Job{}, fmt.Errorf("job params: %w", err)
	}
	j, err := scanJob(s.q.QueryRow(ctx, `INSERT INTO jobs (id, project_id, kind, status, params, created_at)
		VALUES ($1, $2, $3, 'queued', $4, $5) RETURNING `+jobColumns,
		newID(prefixJob), projectID, webhookd.JobDeadLetterReplay, string(params), now))
	return j, translate(err, "job")
}

// GetJob returns one of the project's jobs, or ErrNotFound.
func (s *Store) GetJob(ctx context.Context, projectID, id string) (webhookd.Job, error) {
	j, err := scanJob(s.q.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1 AND project_id = $2`, id, projectID))
	return j, translate(err, "job")
}

// CancelJob cancels one of the project's jobs that is queued or running
// and drops a bulk job's body; a finished job is returned unchanged, an
// unknown one is ErrNotFound. The update waits for the row lock a bulk
// job's chunk holds while it commits (AcceptBulkLines), so once CancelJob
// returns no further line of the job is accepted.
func (s *Store) CancelJob(ctx context.Context, projectID, id string, now time.Time) (webhookd.Job, error) {
	j, err := scanJob(s.q.QueryRow(ctx, `WITH c AS (
			UPDATE jobs SET status = 'canceled', finished_at = $3, locked_until = NULL
			WHERE id = $1 AND project_id = $2 AND status IN ('queued', 'running') RETURNING `+jobColumns+`
		), body AS (DELETE FROM bulk_chunks WHERE job_id IN (SELECT id FROM c))
		SELECT * FROM c`, id, projectID, now))
	if errors.Is(err, pgx.ErrNoRows) {
		return s.GetJob(ctx, projectID, id)
	}
	return j, translate(err, "cancel job")
}

// JobKind returns the kind of a job, or ErrNotFound.
func (s *Store) JobKind(ctx context.Context, id string) (string, error) {
	var kind string
	err := s.q.QueryRow(ctx, `SELECT kind FROM jobs WHERE id = $1`, id).Scan(&kind)
	return kind, translate(err, "job")
}

// RunnableJobs returns the ids of every queued or running job, oldest
// first, so that they can be enqueued again after a restart.
func (s *Store) RunnableJobs(ctx context.Context) ([]string, error) {
	rows, err := s.q.Query(ctx, `SELECT id FROM jobs WHERE status IN ('queued', 'running') ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("runnable jobs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("runnable jobs: %w", err)
	}
	return ids, nil
}

// ClaimedJob is a job one runner holds under a lease. Progress updates
// renew the lease; a runner that let it run out gets ErrJobLeased from them
// once another runner has claimed the job.
type ClaimedJob struct {
	webhookd.Job
	Params json.RawMessage
	Cursor string // the last dead letter processed; "" before the first
	// CursorLine is the last line of a bulk job's body processed; 0
	// before the first.
	CursorLine int
	Scoped     bool   // Total and the scope are fixed: ScopeJob ran
	end        string // the last dead letter in scope
	lease      time.Duration
	until      time.Time // the lease's end; it also proves the lease is ours
}

// Filter decodes the job's params. An unknown field is an error: a filter
// the runner does not fully understand must not replay more than was asked.
func (j *ClaimedJob) Filter() (DeadLetterFilter, error) {
	var f DeadLetterFilter
	dec := json.NewDecoder(bytes.NewReader(j.Params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("job params: %w", err)
	}
	return f, nil
}

// leaseEnd is the end of a lease taken at now, at PostgreSQL's precision so
// that it compares equal once stored.
func leaseEnd(now time.Time, lease time.Duration) time.Time {
	return now.Add(lease).Truncate(time.Microsecond)
}

// ClaimJob marks a queued or running job running (started_at set on the
// first claim) and leases it to the caller until now + lease. A finished
// (succeeded, failed or canceled) job returns ErrJobFinished, a job another runner holds ErrJobLeased, an unknown
// one ErrNotFound.
func (s *Store) ClaimJob(ctx context.Context, id string, now time.Time, lease time.Duration) (*ClaimedJob, error) {
	c := &ClaimedJob{lease: lease, until: leaseEnd(now, lease)}
	var cursor, end *string
	var err error
	c.Job, err = scanJob(s.q.QueryRow(ctx, `UPDATE jobs SET status = 'running', started_at = coalesce(started_at, $2),
			locked_until = $3
		WHERE id = $1 AND status IN ('queued', 'running') AND (locked_until IS NULL OR locked_until <= $2)
		RETURNING `+jobColumns+`, params, cursor, cursor_end, cursor_line`, id, now, c.until), &c.Params, &cursor, &end,
		&c.CursorLine)
	if errors.Is(err, pgx.ErrNoRows) {
		var status string
		if err := s.q.QueryRow(ctx, `SELECT status FROM jobs WHERE id = $1`, id).Scan(&status); err != nil {
			return nil, translate(err, "job")
		}
		if (webhookd.Job{Status: status}).Finished() {
			return nil, ErrJobFinished
		}
		return nil, ErrJobLeased
	}
	if err != nil {
		return nil, fmt.Errorf("claim job: %w", err)
	}
	if cursor != nil {
		c.Cursor = *cursor
	}
	if end != nil {
		c.Scoped, c.end = true, *end
	}
	return c, nil
}

// ScopeJob fixes the job's scope when it first runs: Total becomes the
// number of dead letters f selects that are not replayed, and dead letters
// that appear later are left out.
func (s *Store) ScopeJob(ctx context.Context, j *ClaimedJob, f DeadLetterFilter) error {
	err := s.q.QueryRow(ctx, `UPDATE jobs SET total = greatest(m.n, jobs.done), cursor_end = m.last
		FROM (SELECT count(*) AS n, coalesce(max(id), '') AS last FROM dead_letters
			WHERE `+deadLetterMatch+` AND replayed_at IS NULL) m
		WHERE jobs.id = $6 AND jobs.locked_until = $7 AND jobs.status = 'running'
		RETURNING jobs.total, jobs.cursor_end`, f.args(j.ProjectID, j.ID, j.until)...).Scan(&j.Total, &j.end)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrJobLeased
	}
	if err != nil {
		return fmt.Errorf("scope job: %w", err)
	}
	j.Scoped = true
	return nil
}

// JobDeadLetters returns up to limit dead letters in the job's scope that
// f selects, are not replayed, and come after its cursor, in id order.
func (s *Store) JobDeadLetters(ctx context.Context, j *ClaimedJob, f DeadLetterFilter, limit int) ([]webhookd.DeadLetter, error) {
	rows, err := s.q.Query(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters
		WHERE `+deadLetterMatch+` AND replayed_at IS NULL AND id > $6 AND id <= $7
		ORDER BY id LIMIT $8`, f.args(j.ProjectID, j.Cursor, j.end, limit)...)
	if err != nil {
		return nil, fmt.Errorf("job dead letters: %w", err)
	}
	list, err := collect(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("job dead letters: %w", err)
	}
	return list, nil
}

// UpdateJobProgress stores j's Done, FailedCount and Cursor and renews its
// lease from now. It returns ErrJobCanceled when the job was canceled,
// ErrJobLeased when the lease was lost otherwise.
func (s *Store) UpdateJobProgress(ctx context.Context, j *ClaimedJob, now time.Time) error {
	until := leaseEnd(now, j.lease)
	err := s.q.QueryRow(ctx, `UPDATE jobs SET done = $3, failed_count = $4, cursor = nullif($5, ''),
			total = greatest(total, $3), locked_until = $6
		WHERE id = $1 AND locked_until = $2 AND status = 'running' RETURNING total`,
		j.ID, j.until, j.Done, j.FailedCount, j.Cursor, until).Scan(&j.Total)
	if errors.Is(err, pgx.ErrNoRows) {
		return s.lostJob(ctx, j.ID)
	}
	if err != nil {
		return fmt.Errorf("job progress: %w", err)
	}
	j.until = until
	return nil
}

// FinishJob ends the job with status succeeded or failed (errText, when
// set, saying why), gives up its lease and drops a bulk job's body. It
// returns ErrJobCanceled when the job was canceled meanwhile, ErrJobLeased
// when the lease was lost otherwise.
func (s *Store) FinishJob(ctx context.Context, j *ClaimedJob, status, errText string, now time.Time) error {
	var n int
	err := s.q.QueryRow(ctx, `WITH f AS (
			UPDATE jobs SET status = $3, error = nullif($4, ''), finished_at = $5, locked_until = NULL
			WHERE id = $1 AND locked_until = $2 AND status = 'running' RETURNING id
		), body AS (DELETE FROM bulk_chunks WHERE job_id IN (SELECT id FROM f))
		SELECT count(*) FROM f`, j.ID, j.until, status, errText, now).Scan(&n)
	if err != nil {
		return fmt.Errorf("finish job: %w", err)
	}
	if n == 0 {
		return s.lostJob(ctx, j.ID)
	}
	j.Status, j.FinishedAt = status, &now
	return nil
}

// lostJob says why a runner's job no longer runs under its lease:
// ErrJobCanceled, or ErrJobLeased.
func (s *Store) lostJob(ctx context.Context, id string) error {
	var status string
	if err := s.q.QueryRow(ctx, `SELECT status FROM jobs WHERE id = $1`, id).Scan(&status); err != nil {
		return translate(err, "job")
	}
	if status == webhookd.JobCanceled {
		return ErrJobCanceled
	}
	return ErrJobLeased
}

// ReleaseJob gives up the lease of an unfinished job, so that another run
// may continue it at once. It does nothing once the lease is lost or the
// job finished.
func (s *Store) ReleaseJob(ctx context.Context, j *ClaimedJob) error {
	_, err := s.q.Exec(ctx, `UPDATE jobs SET locked_until = NULL WHERE id = $1 AND locked_until = $2`, j.ID, j.until)
	if err != nil {
		return fmt.Errorf("release job: %w", err)
	}
	return nil
}
