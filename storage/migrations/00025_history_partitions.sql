-- +goose NO TRANSACTION
-- +goose Up
-- History is partitioned by time (SPEC §4): events, deliveries, attempts and
-- dead letters live in partitions of a day each, made ahead by the leader
-- worker (storage.EnsurePartitions), and retention drops a day's four
-- partitions at once instead of deleting rows one by one.
--
-- The partition key is an id, not a time column. Every id is a ULID, whose
-- first ten characters are its time (ms, Crockford base32), so a range of
-- ids is a range of time and a lookup by id prunes to one partition with no
-- other predicate. Events by their id; deliveries by their id, which the
-- write path mints with its event's time (storage.newIDAt), so an event
-- and its deliveries share a day; attempts and dead letters by their
-- delivery's id. A day's four partitions hold exactly one day's events and
-- everything that followed from them, and go together.
--
-- The statements run for every delivery (the claim, the record, a lease
-- given back) name the one partition of their delivery's day
-- (storage.dayRoutes), not these parents: PostgreSQL 15 locks every
-- partition a generic plan names, and through a parent a statement's cost
-- would grow with the days kept. Inserts go through the parents, which
-- open only the partition a row is routed to.
--
-- Dead letters lose their foreign keys as deliveries and attempts did
-- (00007): a key that references a partitioned table is checked through
-- its parent, and a day goes as a whole. What they kept is kept by the
-- write path: a dead letter is inserted by the statement that moves its
-- delivery (from that row's own columns), in its delivery's day, and goes
-- with it.
--
-- What a partitioned table cannot enforce (a unique index must contain the
-- partition key) is kept otherwise: an external id is unique per project
-- through event_external_ids, an unpartitioned table of its own; a
-- delivery per event and endpoint by the write path, which makes an
-- event's deliveries in the statement that makes the event, one per
-- distinct endpoint; attempts' request ids and dead letters' ids are ULIDs
-- minted once, indexed with their partition key beside them.
--
-- An installation with data migrates online: each table becomes the
-- partition "<table>_legacy" of its new parent, covering every id before
-- tomorrow (UTC); the scans that prove it (a CHECK validated, the indexes
-- the parents need built CONCURRENTLY) run before, without blocking
-- writes; the switch itself only renames and attaches. Retention purges
-- the legacy partition row by row as before and drops it once it is empty.
-- A default partition takes any id outside the days made (ids that are no
-- ULIDs, a clock far off), so no write ever fails for want of a partition;
-- retention purges it row by row.
--
-- Run without a transaction, so that validation and index builds do not
-- hold the switch's locks; every step can run again after a failure.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhookd_ulid_prefix(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT string_agg(substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ',
        ((floor(extract(epoch FROM t) * 1000)::bigint >> (5 * (9 - i))) & 31)::int + 1, 1), '' ORDER BY i)
    FROM generate_series(0, 9) AS i
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
DECLARE
    cut text := webhookd_ulid_prefix(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day');
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'deliveries'::regclass) = 'p' THEN
        RETURN; -- switched already
    END IF;
    CREATE TABLE IF NOT EXISTS history_partitions (
        suffix  text PRIMARY KEY CHECK (suffix = 'legacy' OR suffix ~ '^p[0-9]{8}$'),
        lo      timestamptz NOT NULL,
        hi      timestamptz NOT NULL CHECK (hi > lo)
    );
    CREATE TABLE IF NOT EXISTS event_external_ids (
        project_id   text NOT NULL,
        external_id  text NOT NULL,
        event_id     text NOT NULL,
        CONSTRAINT event_external_ids_key PRIMARY KEY (project_id, external_id)
    );
    CREATE INDEX IF NOT EXISTS event_external_ids_event_idx ON event_external_ids (event_id);
    -- Until the switch, events written by the webhookd before this one
    -- keep their external ids here too.
    CREATE OR REPLACE FUNCTION webhookd_copy_external_id() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        INSERT INTO event_external_ids VALUES (NEW.project_id, NEW.external_id, NEW.id) ON CONFLICT DO NOTHING;
        RETURN NULL;
    END $f$;
    DROP TRIGGER IF EXISTS events_copy_external_id ON events;
    CREATE TRIGGER events_copy_external_id AFTER INSERT ON events
        FOR EACH ROW WHEN (NEW.external_id IS NOT NULL) EXECUTE FUNCTION webhookd_copy_external_id();
    -- The bounds of the legacy partitions, checked later without a lock
    -- that stops writes. Tomorrow's start leaves a day for the switch.
    ALTER TABLE events DROP CONSTRAINT IF EXISTS events_legacy_bound;
    ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_legacy_bound;
    ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_legacy_bound;
    ALTER TABLE dead_letters DROP CONSTRAINT IF EXISTS dead_letters_legacy_bound;
    EXECUTE format('ALTER TABLE events ADD CONSTRAINT events_legacy_bound CHECK (id < %L) NOT VALID', 'evt_' || cut);
    EXECUTE format('ALTER TABLE deliveries ADD CONSTRAINT deliveries_legacy_bound CHECK (id < %L) NOT VALID', 'dlv_' || cut);
    EXECUTE format('ALTER TABLE attempts ADD CONSTRAINT attempts_legacy_bound CHECK (delivery_id < %L) NOT VALID', 'dlv_' || cut);
    EXECUTE format('ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_legacy_bound CHECK (delivery_id < %L) NOT VALID', 'dlv_' || cut);
    INSERT INTO history_partitions VALUES ('legacy', 'epoch',
        date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day')
        ON CONFLICT (suffix) DO UPDATE SET hi = EXCLUDED.hi;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'events'::regclass) = 'r' THEN
        INSERT INTO event_external_ids SELECT project_id, external_id, id FROM events WHERE external_id IS NOT NULL
            ON CONFLICT DO NOTHING;
    END IF;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'deliveries'::regclass) = 'r' THEN
        ALTER TABLE events VALIDATE CONSTRAINT events_legacy_bound;
        ALTER TABLE deliveries VALIDATE CONSTRAINT deliveries_legacy_bound;
        ALTER TABLE attempts VALIDATE CONSTRAINT attempts_legacy_bound;
        ALTER TABLE dead_letters VALIDATE CONSTRAINT dead_letters_legacy_bound;
    END IF;
END $$;
-- +goose StatementEnd

-- The indexes the parents have and the old tables lack. A failed
-- concurrent build of an earlier run left an invalid index: it is dropped
-- and built anew. Tables with no rows (a new installation, every test)
-- get them at once: a concurrent build waits for every transaction open
-- in the whole cluster, however small its table.
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'deliveries'::regclass) = 'p' THEN
        RETURN;
    END IF;
    FOR r IN SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
        WHERE i.relname IN ('deliveries_legacy_event_idx_build', 'attempts_legacy_request_idx_build',
            'dead_letters_legacy_id_idx_build') AND NOT x.indisvalid
            AND i.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'deliveries'::regclass)
    LOOP
        EXECUTE format('DROP INDEX %I', r.relname);
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM deliveries) AND NOT EXISTS (SELECT 1 FROM attempts)
        AND NOT EXISTS (SELECT 1 FROM dead_letters) THEN
        CREATE INDEX IF NOT EXISTS deliveries_legacy_event_idx_build ON deliveries (event_id);
        CREATE UNIQUE INDEX IF NOT EXISTS attempts_legacy_request_idx_build ON attempts (request_id, delivery_id);
        CREATE UNIQUE INDEX IF NOT EXISTS dead_letters_legacy_id_idx_build ON dead_letters (id, delivery_id);
    END IF;
END $$;
-- +goose StatementEnd

-- Built beside the writes where there are rows; made above, these skip.
CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_legacy_event_idx_build ON deliveries (event_id);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS attempts_legacy_request_idx_build ON attempts (request_id, delivery_id);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS dead_letters_legacy_id_idx_build ON dead_letters (id, delivery_id);

-- The switch: renames, the parents, the legacy partitions attached (their
-- CHECKs prove the bounds, their indexes match the parents'), the default
-- partitions. Brief locks, no scan.
-- +goose StatementBegin
DO $$
DECLARE
    cut text;
    r record;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'deliveries'::regclass) = 'p' THEN
        RETURN;
    END IF;
    LOCK TABLE events, deliveries, attempts, dead_letters IN ACCESS EXCLUSIVE MODE;
    cut := webhookd_ulid_prefix((SELECT hi FROM history_partitions WHERE suffix = 'legacy'));
    DROP TRIGGER events_copy_external_id ON events;
    DROP FUNCTION webhookd_copy_external_id();
    -- Dead letters lose their foreign keys as deliveries and attempts did
    -- (00007): a day goes as a whole, and a dropped partition cannot be
    -- referenced.
    ALTER TABLE dead_letters DROP CONSTRAINT IF EXISTS dead_letters_delivery_id_fkey,
        DROP CONSTRAINT IF EXISTS dead_letters_event_id_fkey,
        DROP CONSTRAINT IF EXISTS dead_letters_endpoint_id_fkey,
        DROP CONSTRAINT IF EXISTS dead_letters_project_id_fkey;
    FOR r IN SELECT c.relname AS tbl, i.relname AS idx FROM pg_index x
        JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
        WHERE c.oid IN ('events'::regclass, 'deliveries'::regclass, 'attempts'::regclass, 'dead_letters'::regclass)
    LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.idx,
            CASE WHEN r.idx LIKE '%\_legacy\_%' THEN replace(r.idx, '_build', '')
                ELSE r.tbl || '_legacy' || substr(r.idx, length(r.tbl) + 1) END);
    END LOOP;
    ALTER TABLE events RENAME TO events_legacy;
    ALTER TABLE deliveries RENAME TO deliveries_legacy;
    ALTER TABLE attempts RENAME TO attempts_legacy;
    ALTER TABLE dead_letters RENAME TO dead_letters_legacy;

    CREATE TABLE events (LIKE events_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)
        PARTITION BY RANGE (id);
    ALTER TABLE events DROP CONSTRAINT events_legacy_bound, ADD PRIMARY KEY (id);
    CREATE INDEX events_created_idx ON events (created_at);
    CREATE INDEX events_lifecycle_idx ON events ((data->>'endpoint_id'), id DESC)
        WHERE type LIKE 'webhookd.endpoint.%';

    CREATE TABLE deliveries (LIKE deliveries_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)
        PARTITION BY RANGE (id);
    ALTER TABLE deliveries DROP CONSTRAINT deliveries_legacy_bound, ADD PRIMARY KEY (id);
    CREATE INDEX deliveries_event_idx ON deliveries (event_id);
    CREATE INDEX deliveries_project_idx ON deliveries (project_id, id DESC);
    CREATE INDEX deliveries_endpoint_idx ON deliveries (endpoint_id, id DESC);
    CREATE INDEX deliveries_event_type_idx ON deliveries (event_type, id DESC);
    CREATE INDEX deliveries_project_status_idx ON deliveries (project_id, status, id DESC) WHERE status <> 'succeeded';
    CREATE INDEX deliveries_status_idx ON deliveries (status, id DESC) WHERE status <> 'succeeded';
    CREATE INDEX deliveries_created_idx ON deliveries (created_at) WHERE next_attempt_at IS NULL;
    CREATE INDEX deliveries_due_idx ON deliveries (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
    CREATE INDEX deliveries_manual_request_idx ON deliveries (id) WHERE manual_request_id IS NOT NULL;
    CREATE INDEX deliveries_fifo_idx ON deliveries (endpoint_id, fifo_seq)
        WHERE fifo_seq IS NOT NULL AND status IN ('pending', 'retrying');
    CREATE INDEX deliveries_waiting_idx ON deliveries (endpoint_id, next_attempt_at)
        WHERE waiting_reason IN ('endpoint_busy', 'rate_limit', 'circuit_open');

    CREATE TABLE attempts (LIKE attempts_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)
        PARTITION BY RANGE (delivery_id);
    ALTER TABLE attempts DROP CONSTRAINT attempts_legacy_bound;
    CREATE UNIQUE INDEX attempts_delivery_number_key ON attempts
        (delivery_id, number, (CASE WHEN trigger = 'inspector' THEN request_id END)) NULLS NOT DISTINCT;
    CREATE UNIQUE INDEX attempts_request_idx ON attempts (request_id, delivery_id);
    CREATE INDEX attempts_started_idx ON attempts (started_at);

    CREATE TABLE dead_letters (LIKE dead_letters_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)
        PARTITION BY RANGE (delivery_id);
    ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_legacy_bound,
        ADD CONSTRAINT dead_letters_delivery_id_key UNIQUE (delivery_id);
    CREATE UNIQUE INDEX dead_letters_id_idx ON dead_letters (id, delivery_id);
    CREATE INDEX dead_letters_project_idx ON dead_letters (project_id, id DESC);
    CREATE INDEX dead_letters_endpoint_idx ON dead_letters (endpoint_id, id DESC);
    CREATE INDEX dead_letters_event_idx ON dead_letters (event_id);
    CREATE INDEX dead_letters_event_type_idx ON dead_letters (event_type, id DESC);
    CREATE INDEX dead_letters_reason_idx ON dead_letters (reason, id DESC);
    CREATE INDEX dead_letters_at_idx ON dead_letters (dead_lettered_at);

    EXECUTE format('ALTER TABLE events ATTACH PARTITION events_legacy FOR VALUES FROM (MINVALUE) TO (%L)', 'evt_' || cut);
    EXECUTE format('ALTER TABLE deliveries ATTACH PARTITION deliveries_legacy FOR VALUES FROM (MINVALUE) TO (%L)', 'dlv_' || cut);
    EXECUTE format('ALTER TABLE attempts ATTACH PARTITION attempts_legacy FOR VALUES FROM (MINVALUE) TO (%L)', 'dlv_' || cut);
    EXECUTE format('ALTER TABLE dead_letters ATTACH PARTITION dead_letters_legacy FOR VALUES FROM (MINVALUE) TO (%L)', 'dlv_' || cut);
    ALTER TABLE events_legacy DROP CONSTRAINT events_legacy_bound;
    ALTER TABLE deliveries_legacy DROP CONSTRAINT deliveries_legacy_bound;
    ALTER TABLE attempts_legacy DROP CONSTRAINT attempts_legacy_bound;
    ALTER TABLE dead_letters_legacy DROP CONSTRAINT dead_letters_legacy_bound;

    CREATE TABLE events_default PARTITION OF events DEFAULT;
    CREATE TABLE deliveries_default PARTITION OF deliveries DEFAULT WITH (fillfactor = 40);
    CREATE TABLE attempts_default PARTITION OF attempts DEFAULT;
    CREATE TABLE dead_letters_default PARTITION OF dead_letters DEFAULT;
END $$;
-- +goose StatementEnd

-- Whether a delivery ahead of one in its ordered endpoint's queue still
-- waits (deliveries_fifo_idx): an automatic attempt takes only the head of
-- the queue, and the head only once (its lease), so one attempt at a time,
-- in order, however many workers claim at once. The claim names one day's
-- partitions (storage.dayRoutes) but a queue spans days: this asks all of
-- deliveries, from a PL/pgSQL function, which is never inlined into the
-- claim's plan, so that only a claim of a FIFO delivery opens and locks
-- every partition.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhookd_fifo_ahead(endpoint text, seq bigint) RETURNS boolean
LANGUAGE plpgsql STABLE STRICT AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM deliveries h WHERE h.endpoint_id = endpoint AND h.fifo_seq < seq
        AND h.fifo_seq IS NOT NULL AND h.status IN ('pending', 'retrying'));
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$ BEGIN
    RAISE EXCEPTION 'migration 25 (history partitions) cannot be undone in place: restore a backup taken before it';
END $$;
-- +goose StatementEnd
