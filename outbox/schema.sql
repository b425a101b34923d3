-- The outbox in a service's own database: contract version 1 (README,
-- "Outbox"). A service INSERTs rows in its own transactions; webhookd's
-- workers move committed rows into webhookd and delete them. Applied by
-- `webhookd outbox init` under an advisory lock, so it is safe to run
-- twice, and at once from two places.

-- Rows waiting to be moved. A row needs only type and data.
CREATE TABLE IF NOT EXISTS webhookd_outbox (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- moved in this order, as far as commits allow
	type         text NOT NULL,        -- the event type: 1-128 of [A-Za-z0-9._:-]
	data         jsonb NOT NULL,       -- the event's data: any JSON value
	external_id  text,                 -- unique per project in webhookd (409 external_id_taken otherwise)
	endpoint_ids text[],               -- deliver to these endpoints only; NULL: to every subscribed one
	created_at   timestamptz NOT NULL DEFAULT now()
);

-- Rows webhookd refused (bad type, data over the limit or against the
-- event type's schema, an unknown endpoint id, a taken external_id): moved
-- here with the reason, in the transaction that deletes them from
-- webhookd_outbox, so that one bad row never holds up the rest.
CREATE TABLE IF NOT EXISTS webhookd_outbox_refused (
	id            bigint PRIMARY KEY,  -- the row's id in webhookd_outbox
	type          text NOT NULL,
	data          jsonb NOT NULL,
	external_id   text,
	endpoint_ids  text[],
	created_at    timestamptz NOT NULL,
	refused_at    timestamptz NOT NULL DEFAULT now(),
	error_code    text NOT NULL,       -- the API's error code: validation_failed, external_id_taken, ...
	error_message text NOT NULL,
	error_field   text                 -- the field it names, when it names one
);

-- Wakes the relays (LISTEN webhookd_outbox) when a transaction that
-- inserted rows commits; a rolled-back one notifies nothing. Once per
-- statement, not per row.
CREATE OR REPLACE FUNCTION webhookd_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('webhookd_outbox', '');
	RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS webhookd_outbox_notify ON webhookd_outbox;
CREATE TRIGGER webhookd_outbox_notify AFTER INSERT ON webhookd_outbox
	FOR EACH STATEMENT EXECUTE FUNCTION webhookd_outbox_notify();
