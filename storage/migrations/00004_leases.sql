-- +goose Up
-- An attempt leases its delivery instead of holding a row lock through the
-- HTTP request: lease_owner is the attempt's request id, lease_until when a
-- worker that died mid-attempt loses it. A delivery whose lease has run out
-- is free again (and due, if next_attempt_at says so).
-- auto_attempts counts the automatic attempts alone: the retry schedule
-- follows it, so manual redeliveries never use up a delivery's retries.
-- max_in_flight overrides the worker's per-endpoint in-flight cap.
ALTER TABLE deliveries
    ADD COLUMN lease_owner text CHECK (lease_owner LIKE 'req\_%'),
    ADD COLUMN lease_until timestamptz,
    ADD COLUMN auto_attempts integer NOT NULL DEFAULT 0 CHECK (auto_attempts >= 0),
    ADD CONSTRAINT deliveries_lease_check CHECK ((lease_owner IS NULL) = (lease_until IS NULL)),
    ADD CONSTRAINT deliveries_auto_attempts_count_check CHECK (auto_attempts <= attempts_count);
UPDATE deliveries d SET auto_attempts = (SELECT count(*) FROM attempts a
    WHERE a.delivery_id = d.id AND a.trigger IN ('auto', 'test'))
WHERE d.attempts_count > 0;
ALTER TABLE endpoints
    ADD COLUMN max_in_flight integer CHECK (max_in_flight BETWEEN 1 AND 1000);
-- Room in each page, so that taking and giving up a lease (columns no index
-- covers) are HOT updates that touch no index.
ALTER TABLE deliveries SET (fillfactor = 70);

-- +goose Down
ALTER TABLE deliveries RESET (fillfactor);
ALTER TABLE endpoints DROP COLUMN max_in_flight;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_auto_attempts_count_check, DROP CONSTRAINT deliveries_lease_check,
    DROP COLUMN auto_attempts, DROP COLUMN lease_until, DROP COLUMN lease_owner;
