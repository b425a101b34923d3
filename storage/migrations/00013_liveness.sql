-- +goose Up
-- Worker liveness (SPEC §1: a dead worker's work is back within seconds).
-- Each worker process beats here every second; a delivery's lease names
-- the worker that holds it, so the leases of a worker that stopped beating
-- can be voided at once instead of running out (minutes at default
-- timeouts). lease_worker is in no index, so a claim stays a HOT update.
CREATE TABLE workers (
    id         text PRIMARY KEY,
    started_at timestamptz NOT NULL,
    beat_at    timestamptz NOT NULL,
    -- the worker's adaptive limits of the endpoints it delivers to lately:
    -- {"ep_...": [limit, in_flight, waiting], ...}
    limits     jsonb NOT NULL DEFAULT '{}'
);
ALTER TABLE deliveries ADD COLUMN lease_worker text;

-- max_in_flight is the ceiling of the endpoint's adaptive limit: 1000
-- unless the endpoint sets a lower one (SPEC §2).
UPDATE endpoints SET max_in_flight = 1000 WHERE max_in_flight IS NULL;
ALTER TABLE endpoints ALTER COLUMN max_in_flight SET DEFAULT 1000, ALTER COLUMN max_in_flight SET NOT NULL;

-- +goose Down
ALTER TABLE endpoints ALTER COLUMN max_in_flight DROP NOT NULL, ALTER COLUMN max_in_flight DROP DEFAULT;
ALTER TABLE deliveries DROP COLUMN lease_worker;
DROP TABLE workers;
