-- +goose Up
-- One schedule (SPEC §1): a delivery that waits says why, beside the time
-- its next_attempt_at gives. NULL while nothing holds it back: pending and
-- due, in flight, or done. 'schedule' is a retry's wait; the others are
-- waits without an attempt, for its endpoint (busy, rate limit, open
-- circuit) or for its turn in an ordered queue.
ALTER TABLE deliveries ADD COLUMN waiting_reason text
    CHECK (waiting_reason IN ('schedule', 'endpoint_busy', 'rate_limit', 'circuit_open', 'fifo_turn'));
-- When a circuit closes, the deliveries that waited for it are due at once:
-- found by their endpoint. Only deliveries held back by their endpoint take
-- an entry, so the write path of every other delivery pays nothing for it.
CREATE INDEX deliveries_waiting_idx ON deliveries (endpoint_id, next_attempt_at)
    WHERE waiting_reason IN ('endpoint_busy', 'rate_limit', 'circuit_open');

-- +goose Down
DROP INDEX deliveries_waiting_idx;
ALTER TABLE deliveries DROP COLUMN waiting_reason;
