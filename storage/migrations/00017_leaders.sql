-- +goose Up
-- The turn of a task that one process at a time runs (the reconciler, the
-- retention purge): a lease, until a time on PostgreSQL's clock, of the
-- holder that took it. A lease holds no connection while its task runs, so
-- the task can use the whole pool; a holder that dies gives the turn up
-- when its lease runs out.
CREATE TABLE leaders (
    name   text PRIMARY KEY,
    holder text NOT NULL,
    until  timestamptz NOT NULL
);

-- +goose Down
DROP TABLE leaders;
