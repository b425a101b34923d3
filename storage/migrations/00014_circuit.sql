-- +goose Up
-- The circuit breaker of each endpoint (SPEC §3 "Endpoint lifecycle"),
-- shared by every worker: consecutive failed attempts, and while the
-- circuit is open, when the next probe may go and how many probes failed.
-- failing_since is the first failure after the last success, for the
-- auto-disable window.
ALTER TABLE endpoints
    ADD COLUMN circuit text NOT NULL DEFAULT 'closed' CHECK (circuit IN ('closed', 'open', 'probing')),
    ADD COLUMN failures integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
    ADD COLUMN failing_since timestamptz,
    ADD COLUMN circuit_opened_at timestamptz,
    ADD COLUMN probe_at timestamptz,
    ADD COLUMN probes integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT endpoints_circuit_check2 CHECK ((circuit = 'closed') = (probe_at IS NULL));
CREATE INDEX endpoints_circuit_idx ON endpoints (circuit_opened_at) WHERE circuit <> 'closed';
-- An endpoint with no success for WEBHOOKD_ENDPOINT_DISABLE_AFTER is disabled as failing.
ALTER TABLE endpoints DROP CONSTRAINT endpoints_disabled_reason_check,
    ADD CONSTRAINT endpoints_disabled_reason_check CHECK (disabled_reason IN ('manual', 'gone', 'failing'));

-- +goose Down
DROP INDEX endpoints_circuit_idx;
ALTER TABLE endpoints DROP CONSTRAINT endpoints_disabled_reason_check,
    ADD CONSTRAINT endpoints_disabled_reason_check CHECK (disabled_reason IN ('manual', 'gone')) NOT VALID;
ALTER TABLE endpoints DROP COLUMN probes, DROP COLUMN probe_at, DROP COLUMN circuit_opened_at,
    DROP COLUMN failing_since, DROP COLUMN failures, DROP COLUMN circuit;
