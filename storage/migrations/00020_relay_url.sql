-- +goose Up
-- Relay endpoints (SPEC §3 "Relay endpoints"): an endpoint's URL may be
-- relay://NAME, whose deliveries go through the API's stream to whoever runs
-- `webhookd listen` for NAME; no address is ever dialled for it.
ALTER TABLE endpoints DROP CONSTRAINT endpoints_url_check,
    ADD CONSTRAINT endpoints_url_check CHECK (url ~ '^https?://' OR url ~ '^relay://[A-Za-z0-9_-]{1,64}$');

-- +goose Down
ALTER TABLE endpoints DROP CONSTRAINT endpoints_url_check,
    ADD CONSTRAINT endpoints_url_check CHECK (url ~ '^https?://');
