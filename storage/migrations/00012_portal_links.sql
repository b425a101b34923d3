-- +goose Up
-- One-time links into the integrators' portal (SPEC §5b). Only the
-- SHA-256 of a link's token is kept; opening the link sets spent_at, once.
CREATE TABLE portal_links (
    token_hash  bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    project_id  text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL CHECK (expires_at > created_at),
    spent_at    timestamptz
);
-- Retention drops links that can no longer be opened.
CREATE INDEX portal_links_expires_idx ON portal_links (expires_at);

-- +goose Down
DROP TABLE portal_links;
