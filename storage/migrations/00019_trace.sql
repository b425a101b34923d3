-- +goose Up
-- Tracing (SPEC §7): an event keeps the W3C traceparent of the span that
-- wrote it, so that every attempt of every delivery of it, in whichever
-- worker and however much later, is a span of the caller's trace; an
-- attempt keeps the trace id it was sent under, for the dashboard and the
-- API to show. NULL while tracing is off (and for what was written before).
ALTER TABLE events ADD COLUMN trace_parent text;
ALTER TABLE attempts ADD COLUMN trace_id text;

-- +goose Down
ALTER TABLE attempts DROP COLUMN trace_id;
ALTER TABLE events DROP COLUMN trace_parent;
