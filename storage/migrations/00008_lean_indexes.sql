-- +goose Up
-- Every event and delivery is inserted once and most deliveries are updated
-- once more, off HOT (their status changes): each index that takes an entry
-- costs every one of those writes. These three took entries nothing reads.
--
-- No query reads events by (project_id, id): an event is read by its id,
-- by (project_id, external_id), and by age for retention.
DROP INDEX events_project_idx;
-- Most events have no external_id; only those that do need an entry to be
-- kept unique. The index keeps the constraint's name, which errors report.
ALTER TABLE events DROP CONSTRAINT events_external_id_key;
CREATE UNIQUE INDEX events_external_id_key ON events (project_id, external_id) WHERE external_id IS NOT NULL;
-- Retention walks by age only the deliveries that are done (no next
-- attempt); pending and retrying ones need no entry, and a delivery now
-- takes one when it is done, not also when it is made.
DROP INDEX deliveries_created_idx;
CREATE INDEX deliveries_created_idx ON deliveries (created_at) WHERE next_attempt_at IS NULL;

-- +goose Down
DROP INDEX deliveries_created_idx;
CREATE INDEX deliveries_created_idx ON deliveries (created_at);
DROP INDEX events_external_id_key;
ALTER TABLE events ADD CONSTRAINT events_external_id_key UNIQUE (project_id, external_id);
CREATE INDEX events_project_idx ON events (project_id, id DESC);
