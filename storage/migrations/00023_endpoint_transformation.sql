-- +goose Up
-- An endpoint's transformation (SPEC §3 "Filters and transformations"):
-- JavaScript source defining function handler(webhook), checked by the API
-- when set (package transform) and run before each request is signed.
-- NULL: none, the event's body goes as it is.
--
-- It brings a delivery status, canceled (the script returned cancel: true:
-- no attempt, done like succeeded), and a dead-letter reason,
-- transformation_failed (it threw or ran past its budget: it would fail
-- the same way again). Both checks widen, so rows already there pass them:
-- they are added NOT VALID (no scan under this ALTER's exclusive lock,
-- which a table of millions of deliveries would hold for minutes) and
-- validated by the next migration outside any transaction, under a lock
-- that lets deliveries be read and written meanwhile.
ALTER TABLE endpoints ADD COLUMN transformation text CHECK (octet_length(transformation) BETWEEN 1 AND 65536);
ALTER TABLE deliveries DROP CONSTRAINT deliveries_status_check,
    ADD CONSTRAINT deliveries_status_check CHECK (status IN ('pending', 'retrying', 'succeeded', 'dead_letter', 'canceled')) NOT VALID;
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_reason_check,
    ADD CONSTRAINT dead_letters_reason_check
        CHECK (reason IN ('exhausted', 'client_error', 'redirect', 'endpoint_disabled', 'transformation_failed')) NOT VALID;

-- +goose Down
-- A canceled delivery has no earlier state to go back to: it is kept as
-- done, succeeded without an attempt; a transformation_failed dead letter
-- becomes an exhausted one.
UPDATE deliveries SET status = 'succeeded' WHERE status = 'canceled';
UPDATE dead_letters SET reason = 'exhausted' WHERE reason = 'transformation_failed';
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_reason_check,
    ADD CONSTRAINT dead_letters_reason_check CHECK (reason IN ('exhausted', 'client_error', 'redirect', 'endpoint_disabled'));
ALTER TABLE deliveries DROP CONSTRAINT deliveries_status_check,
    ADD CONSTRAINT deliveries_status_check CHECK (status IN ('pending', 'retrying', 'succeeded', 'dead_letter'));
ALTER TABLE endpoints DROP COLUMN transformation;
