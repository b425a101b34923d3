-- +goose Up
-- The dashboard's deliveries page filters every project's deliveries by
-- status or by event type, newest first. Without these, such a filter walks
-- the primary key backwards through every row of the window, reading all
-- 1,000,000 when nothing matches; with them it reads one index range.
-- Neither column changes on a lease (those updates stay HOT); status changes
-- already touch deliveries_project_status_idx.
CREATE INDEX deliveries_event_type_idx ON deliveries (event_type, id DESC);
CREATE INDEX deliveries_status_idx ON deliveries (status, id DESC);
-- The same for the dead letters page; dead letters are written rarely.
CREATE INDEX dead_letters_event_type_idx ON dead_letters (event_type, id DESC);
CREATE INDEX dead_letters_reason_idx ON dead_letters (reason, id DESC);

-- An inspector attempt (trigger 'inspector') carries the number the
-- delivery's next attempt will carry and never changes the delivery, so
-- several may share a number with each other and with a real attempt. Real
-- attempts keep one row per number: the third key is NULL for them and
-- NULLs are not distinct here. The same index serves a delivery's attempts
-- in order and the cascade from deliveries, as the old key did.
ALTER TABLE attempts DROP CONSTRAINT attempts_pkey;
CREATE UNIQUE INDEX attempts_delivery_number_key ON attempts
    (delivery_id, number, (CASE WHEN trigger = 'inspector' THEN request_id END)) NULLS NOT DISTINCT;
ALTER TABLE attempts DROP CONSTRAINT attempts_request_id_key, ADD PRIMARY KEY (request_id);

-- Inspector bins: request bins served by webhookd on the dashboard listener
-- (POST /in/{id}); a bin keeps its newest requests (the dashboard trims the
-- rest as new ones arrive). bin_inspector is where "Send to inspector"
-- delivers.
CREATE TABLE inspector_bins (
    id          text PRIMARY KEY CHECK (id ~ '^bin_[A-Za-z0-9]{1,40}$'),
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO inspector_bins (id, name) VALUES ('bin_inspector', 'Default bin');

CREATE TABLE inspector_requests (
    id           text PRIMARY KEY CHECK (id LIKE 'ir\_%'),
    bin_id       text NOT NULL REFERENCES inspector_bins (id) ON DELETE CASCADE,
    method       text NOT NULL,
    path         text NOT NULL,
    remote_addr  text NOT NULL,
    headers      jsonb NOT NULL, -- {"Name": ["value", ...]}, as received
    body         bytea NOT NULL,
    received_at  timestamptz NOT NULL
);
CREATE INDEX inspector_requests_bin_idx ON inspector_requests (bin_id, id DESC);

-- The overview chart's rollup: attempts per minute by outcome, and the
-- deliveries that became dead letters in that minute. A minute is rolled
-- up once, after every attempt begun in it has been recorded, from the
-- started_at range of attempts_started_idx; the chart reads at most a
-- day of rows by key, never the attempts.
CREATE TABLE attempt_minutes (
    minute         timestamptz PRIMARY KEY,
    succeeded      integer NOT NULL CHECK (succeeded >= 0),
    failed         integer NOT NULL CHECK (failed >= 0),
    dead_lettered  integer NOT NULL CHECK (dead_lettered >= 0)
);

-- +goose Down
DROP TABLE attempt_minutes, inspector_requests, inspector_bins;
DELETE FROM attempts WHERE trigger = 'inspector';
DROP INDEX attempts_delivery_number_key;
ALTER TABLE attempts DROP CONSTRAINT attempts_pkey;
ALTER TABLE attempts ADD CONSTRAINT attempts_request_id_key UNIQUE (request_id),
    ADD PRIMARY KEY (delivery_id, number);
DROP INDEX dead_letters_reason_idx, dead_letters_event_type_idx, deliveries_status_idx, deliveries_event_type_idx;
