-- +goose Up
-- A dead-letter replay job walks its dead letters in id order. cursor is the
-- last one it processed, so a job resumes after a restart without redoing
-- work; cursor_end is the last one in its scope, fixed when it starts, so
-- dead letters that appear while it runs are left for another job.
ALTER TABLE jobs
    ADD COLUMN cursor text CHECK (cursor LIKE 'dl\_%'),
    ADD COLUMN cursor_end text;

-- +goose Down
ALTER TABLE jobs DROP COLUMN cursor_end, DROP COLUMN cursor;
