-- +goose Up
-- Bulk jobs (SPEC §2 "Bulk jobs"). POST /v1/events/bulk streams its NDJSON
-- body into bulk_chunks, a few hundred lines a row, in the transaction that
-- creates the job, so the job exists exactly when its whole body does. The
-- runner accepts a chunk's lines in one transaction that also advances the
-- job's line cursor, counts and refused lines (job_errors): a run killed
-- mid-job resumes after the cursor, never accepting a line twice.
--
-- A bulk job's done counts accepted lines and failed_count refused ones, so
-- the two add up to at most total (a replay's failed attempts are part of
-- its done). canceled is a finished state, like succeeded and failed.
ALTER TABLE jobs DROP CONSTRAINT jobs_kind_check,
    ADD CONSTRAINT jobs_kind_check CHECK (kind IN ('dead_letter_replay', 'event_bulk')),
    DROP CONSTRAINT jobs_status_check,
    ADD CONSTRAINT jobs_status_check CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'canceled')),
    DROP CONSTRAINT jobs_check2,
    ADD CONSTRAINT jobs_finished_check CHECK ((status IN ('succeeded', 'failed', 'canceled')) = (finished_at IS NOT NULL)),
    DROP CONSTRAINT jobs_check1,
    ADD CONSTRAINT jobs_failed_count_check CHECK (failed_count >= 0 AND
        CASE kind WHEN 'event_bulk' THEN done + failed_count <= total ELSE failed_count <= done END),
    ADD COLUMN cursor_line integer NOT NULL DEFAULT 0 CHECK (cursor_line >= 0);

-- first_line is the 1-based line number of the chunk's first line; body is
-- its lines as received (blank lines kept, so that numbers stay true), each
-- ended by a newline.
CREATE TABLE bulk_chunks (
    job_id      text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    first_line  integer NOT NULL CHECK (first_line >= 1),
    line_count  integer NOT NULL CHECK (line_count >= 1),
    body        bytea NOT NULL,
    PRIMARY KEY (job_id, first_line)
);

-- A bulk job's refused lines, in line order.
CREATE TABLE job_errors (
    job_id   text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    line     integer NOT NULL CHECK (line >= 1),
    code     text NOT NULL,
    message  text NOT NULL,
    field    text,
    PRIMARY KEY (job_id, line)
);

-- +goose Down
DROP TABLE job_errors, bulk_chunks;
DELETE FROM jobs WHERE kind = 'event_bulk' OR status = 'canceled';
ALTER TABLE jobs DROP COLUMN cursor_line,
    DROP CONSTRAINT jobs_failed_count_check,
    ADD CONSTRAINT jobs_check1 CHECK (failed_count >= 0 AND failed_count <= done),
    DROP CONSTRAINT jobs_finished_check,
    ADD CONSTRAINT jobs_check2 CHECK ((status IN ('succeeded', 'failed')) = (finished_at IS NOT NULL)),
    DROP CONSTRAINT jobs_status_check,
    ADD CONSTRAINT jobs_status_check CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    DROP CONSTRAINT jobs_kind_check,
    ADD CONSTRAINT jobs_kind_check CHECK (kind IN ('dead_letter_replay'));
