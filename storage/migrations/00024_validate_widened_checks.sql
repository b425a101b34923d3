-- +goose NO TRANSACTION
-- +goose Up
-- Validates the checks migration 23 widened NOT VALID. VALIDATE CONSTRAINT
-- scans the table under SHARE UPDATE EXCLUSIVE, which lets deliveries and
-- dead letters be read and written while it runs; outside a transaction,
-- so that lock is not held together with migration 23's.
ALTER TABLE deliveries VALIDATE CONSTRAINT deliveries_status_check;
ALTER TABLE dead_letters VALIDATE CONSTRAINT dead_letters_reason_check;

-- +goose Down
-- Nothing to undo: a validated check is the one migration 23 added.
SELECT 1;
