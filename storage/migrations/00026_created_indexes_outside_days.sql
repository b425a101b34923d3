-- +goose Up
-- The created_at indexes of events and deliveries serve one reader: the
-- retention's purge of the default partitions, row by row (storage.Purge),
-- which names deliveries_default and events_default alone. A day's rows go
-- with their day, whole (DropDay); no other query can use either index (the
-- listings' created_at bound sits beside an id order, and deliveries' index
-- is partial on next_attempt_at IS NULL, which they do not imply). Yet
-- through the parents every day's partition kept them: an entry for each
-- event at its insert, and one for each delivery when it ends — two of
-- about twenty index entries a single-event POST writes (issue 38,
-- pg_walinspect: btree inserts are half of the WAL such a POST writes).
-- They now live on the default partitions only, where the purge reads them;
-- days made from here on have none, and dropping the parents' indexes
-- drops those of the days made already.
DROP INDEX deliveries_created_idx;
CREATE INDEX deliveries_default_created_idx ON deliveries_default (created_at) WHERE next_attempt_at IS NULL;
DROP INDEX events_created_idx;
CREATE INDEX events_default_created_idx ON events_default (created_at);

-- +goose Down
DROP INDEX events_default_created_idx;
CREATE INDEX events_created_idx ON events (created_at);
DROP INDEX deliveries_default_created_idx;
CREATE INDEX deliveries_created_idx ON deliveries (created_at) WHERE next_attempt_at IS NULL;
