-- +goose Up
-- A project's catalog of event types (SPEC §5b): a name (the event type
-- rules), a description, an optional JSON Schema (2020-12) and example,
-- and validate, which makes the API refuse events of the type whose data
-- does not match. Deleting archives: the row stays, archived_at set, so a
-- name once published is never silently reused. version grows with every
-- change, so a compiled schema can be cached by (project, name, version).
CREATE TABLE event_types (
    project_id   text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name         text NOT NULL CHECK (name ~ '^[A-Za-z0-9._:-]{1,128}$'),
    description  text NOT NULL DEFAULT '' CHECK (length(description) <= 4096),
    schema       jsonb,
    example      jsonb,
    validate     boolean NOT NULL DEFAULT false,
    version      integer NOT NULL DEFAULT 1 CHECK (version > 0),
    archived_at  timestamptz,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (project_id, name),
    -- validating needs a schema to validate against
    CHECK (NOT validate OR schema IS NOT NULL)
);
-- The API asks, for each event request, which types of the project validate.
CREATE INDEX event_types_validate_idx ON event_types (project_id) WHERE validate AND archived_at IS NULL;

-- +goose Down
DROP TABLE event_types;
