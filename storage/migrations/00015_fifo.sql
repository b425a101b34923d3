-- +goose Up
-- Ordered endpoints (SPEC §3 "Endpoint lifecycle"): an endpoint with
-- ordering 'fifo' gets its deliveries one at a time, in the order their
-- events were accepted. Each delivery made for such an endpoint takes a
-- number from deliveries_fifo_seq in the transaction that accepts its event
-- (NULL for every other delivery), and keeps it when the endpoint's
-- ordering changes: the order is fixed at acceptance. The partial index
-- holds only the waiting deliveries of ordered endpoints: finding the head
-- of an endpoint's queue costs one index probe, and other deliveries pay
-- nothing for it.
ALTER TABLE endpoints
    ADD COLUMN ordering text NOT NULL DEFAULT 'none' CHECK (ordering IN ('none', 'fifo'));
CREATE SEQUENCE deliveries_fifo_seq AS bigint;
ALTER TABLE deliveries ADD COLUMN fifo_seq bigint;
CREATE INDEX deliveries_fifo_idx ON deliveries (endpoint_id, fifo_seq)
    WHERE fifo_seq IS NOT NULL AND status IN ('pending', 'retrying');
-- The worker whose attempt took an open circuit's probe: when it is found
-- dead, the probe is freed with its leases, so the endpoint's deliveries do
-- not wait for the probe's time to run out.
ALTER TABLE endpoints ADD COLUMN probe_worker text;

-- An endpoint's page shows its recent lifecycle (circuit opened and closed,
-- disabled) from its operational events: a small index of those alone, by
-- the endpoint they are about.
CREATE INDEX events_lifecycle_idx ON events ((data->>'endpoint_id'), id DESC)
    WHERE type LIKE 'webhookd.endpoint.%';

-- +goose Down
DROP INDEX events_lifecycle_idx;
ALTER TABLE endpoints DROP COLUMN probe_worker;
DROP INDEX deliveries_fifo_idx;
ALTER TABLE deliveries DROP COLUMN fifo_seq;
DROP SEQUENCE deliveries_fifo_seq;
ALTER TABLE endpoints DROP COLUMN ordering;
