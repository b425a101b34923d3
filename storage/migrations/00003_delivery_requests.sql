-- +goose Up
-- trigger is what automatic attempts of a delivery are logged as: 'test' for
-- the delivery of POST /v1/endpoints/{id}/test, else 'auto'.
-- manual_request_id is a redelivery asked for and not yet attempted; it lives
-- here, not only in Redis, so the reconciler can re-enqueue it after Redis
-- is lost.
ALTER TABLE deliveries
    ADD COLUMN trigger text NOT NULL DEFAULT 'auto' CHECK (trigger IN ('auto', 'test')),
    ADD COLUMN manual_request_id text CHECK (manual_request_id LIKE 'req\_%'),
    ADD COLUMN manual_requested_by text,
    ADD CONSTRAINT deliveries_manual_request_check
        CHECK ((manual_request_id IS NULL) = (manual_requested_by IS NULL));
CREATE INDEX deliveries_manual_request_idx ON deliveries (id) WHERE manual_request_id IS NOT NULL;

-- +goose Down
DROP INDEX deliveries_manual_request_idx;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_manual_request_check,
    DROP COLUMN manual_requested_by, DROP COLUMN manual_request_id, DROP COLUMN trigger;
