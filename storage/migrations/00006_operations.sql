-- +goose Up
-- Deleting an event checks dead_letters for rows that reference it (the
-- foreign key): without this index every event the retention purge
-- removed scanned the whole table.
CREATE INDEX IF NOT EXISTS dead_letters_event_idx ON dead_letters (event_id);

-- With WEBHOOKD_ENCRYPTION_KEY set, endpoint secrets are stored encrypted:
-- whenc:<key id>:<base64>, beside the whsec_ values stored before.
ALTER TABLE endpoints
    DROP CONSTRAINT IF EXISTS endpoints_secret_check,
    DROP CONSTRAINT IF EXISTS endpoints_previous_secret_check,
    ADD CONSTRAINT endpoints_secret_check CHECK (secret LIKE 'whsec\_%' OR secret LIKE 'whenc:%'),
    ADD CONSTRAINT endpoints_previous_secret_check
        CHECK (previous_secret LIKE 'whsec\_%' OR previous_secret LIKE 'whenc:%');

-- +goose Down
ALTER TABLE endpoints
    DROP CONSTRAINT endpoints_secret_check,
    DROP CONSTRAINT endpoints_previous_secret_check,
    ADD CONSTRAINT endpoints_secret_check CHECK (secret LIKE 'whsec\_%'),
    ADD CONSTRAINT endpoints_previous_secret_check CHECK (previous_secret LIKE 'whsec\_%');
DROP INDEX IF EXISTS dead_letters_event_idx;
