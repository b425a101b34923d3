-- +goose Up
CREATE TABLE projects (
    id                     text PRIMARY KEY CHECK (id LIKE 'prj\_%'),
    name                   text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 128),
    rate_limit_per_minute  integer NOT NULL DEFAULT 6000 CHECK (rate_limit_per_minute > 0),
    idempotency_ttl_seconds integer NOT NULL DEFAULT 86400
        CHECK (idempotency_ttl_seconds BETWEEN 1 AND 259200),
    created_at             timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id          text PRIMARY KEY CHECK (id LIKE 'key\_%'),
    project_id  text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    key_hash    bytea NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    prefix      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE INDEX api_keys_project_idx ON api_keys (project_id);

CREATE TABLE endpoints (
    id                     text PRIMARY KEY CHECK (id LIKE 'ep\_%'),
    project_id             text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    url                    text NOT NULL CHECK (url ~ '^https?://'),
    description            text NOT NULL DEFAULT '',
    event_types            text[] NOT NULL DEFAULT '{}',
    status                 text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    disabled_reason        text CHECK (disabled_reason IN ('manual', 'gone')),
    rate_limit_per_second  integer CHECK (rate_limit_per_second > 0),
    secret                 text NOT NULL CHECK (secret LIKE 'whsec\_%'),
    previous_secret        text CHECK (previous_secret LIKE 'whsec\_%'),
    previous_expires_at    timestamptz,
    version                integer NOT NULL DEFAULT 1 CHECK (version > 0),
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    deleted_at             timestamptz,
    CHECK ((status = 'active') = (disabled_reason IS NULL)),
    CHECK ((previous_secret IS NULL) = (previous_expires_at IS NULL))
);
CREATE INDEX endpoints_project_idx ON endpoints (project_id, id DESC) WHERE deleted_at IS NULL;

CREATE TABLE events (
    id           text PRIMARY KEY CHECK (id LIKE 'evt\_%'),
    project_id   text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    type         text NOT NULL CHECK (type ~ '^[A-Za-z0-9._:-]{1,128}$'),
    data         json NOT NULL,
    external_id  text CHECK (length(external_id) BETWEEN 1 AND 255),
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT events_external_id_key UNIQUE (project_id, external_id)
);
CREATE INDEX events_project_idx ON events (project_id, id DESC);
CREATE INDEX events_created_idx ON events (created_at);

CREATE TABLE deliveries (
    id                text PRIMARY KEY CHECK (id LIKE 'dlv\_%'),
    project_id        text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    event_id          text NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    endpoint_id       text NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    event_type        text NOT NULL,
    status            text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'retrying', 'succeeded', 'dead_letter')),
    attempts_count    integer NOT NULL DEFAULT 0 CHECK (attempts_count >= 0),
    next_attempt_at   timestamptz,
    last_status_code  integer,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, endpoint_id),
    -- a delivery waiting for an attempt has a time for it; a finished one has none
    CHECK ((status IN ('pending', 'retrying')) = (next_attempt_at IS NOT NULL)),
    CHECK (status <> 'pending' OR attempts_count = 0),
    CHECK (status <> 'retrying' OR attempts_count > 0)
);
CREATE INDEX deliveries_project_idx ON deliveries (project_id, id DESC);
CREATE INDEX deliveries_project_status_idx ON deliveries (project_id, status, id DESC);
CREATE INDEX deliveries_endpoint_idx ON deliveries (endpoint_id, id DESC);
CREATE INDEX deliveries_event_idx ON deliveries (event_id);
CREATE INDEX deliveries_due_idx ON deliveries (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
CREATE INDEX deliveries_created_idx ON deliveries (created_at);

CREATE TABLE attempts (
    delivery_id       text NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    number            integer NOT NULL CHECK (number > 0),
    request_id        text NOT NULL UNIQUE CHECK (request_id LIKE 'req\_%'),
    url               text NOT NULL,
    trigger           text NOT NULL CHECK (trigger IN ('auto', 'manual', 'test', 'inspector')),
    status_code       integer,
    error             text,
    duration_ms       bigint NOT NULL CHECK (duration_ms >= 0),
    started_at        timestamptz NOT NULL,
    request_headers   jsonb NOT NULL DEFAULT '{}',
    response_headers  jsonb NOT NULL DEFAULT '{}',
    response_body     text NOT NULL DEFAULT '' CHECK (octet_length(response_body) <= 8192),
    PRIMARY KEY (delivery_id, number),
    CHECK (status_code IS NOT NULL OR error IS NOT NULL)
);
CREATE INDEX attempts_started_idx ON attempts (started_at);

CREATE TABLE dead_letters (
    id                text PRIMARY KEY CHECK (id LIKE 'dl\_%'),
    project_id        text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    delivery_id       text NOT NULL UNIQUE REFERENCES deliveries (id) ON DELETE CASCADE,
    event_id          text NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    endpoint_id       text NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    event_type        text NOT NULL,
    reason            text NOT NULL
        CHECK (reason IN ('exhausted', 'client_error', 'redirect', 'endpoint_disabled')),
    last_status_code  integer,
    dead_lettered_at  timestamptz NOT NULL DEFAULT now(),
    replayed_at       timestamptz,
    replayed_by       text,
    CHECK ((replayed_at IS NULL) = (replayed_by IS NULL))
);
CREATE INDEX dead_letters_project_idx ON dead_letters (project_id, id DESC);
CREATE INDEX dead_letters_endpoint_idx ON dead_letters (endpoint_id, id DESC);
CREATE INDEX dead_letters_at_idx ON dead_letters (dead_lettered_at);

-- An Idempotency-Key record. It is inserted in the transaction of the request
-- it guards, so a concurrent repeat waits on the row lock until the first
-- commits (and then replays) or rolls back (and then runs anew).
CREATE TABLE idempotency_records (
    project_id        text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    key               text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    fingerprint       bytea NOT NULL CHECK (length(fingerprint) = 32),
    status_code       integer CHECK (status_code BETWEEN 200 AND 499 AND status_code <> 429),
    content_type      text,
    response_body     bytea,
    created_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL CHECK (expires_at > created_at),
    PRIMARY KEY (project_id, key)
);
CREATE INDEX idempotency_records_expires_idx ON idempotency_records (expires_at);

CREATE TABLE jobs (
    id            text PRIMARY KEY CHECK (id LIKE 'job\_%'),
    project_id    text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    kind          text NOT NULL CHECK (kind IN ('dead_letter_replay')),
    status        text NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    params        jsonb NOT NULL DEFAULT '{}',
    total         integer NOT NULL DEFAULT 0 CHECK (total >= 0),
    done          integer NOT NULL DEFAULT 0 CHECK (done >= 0 AND done <= total),
    failed_count  integer NOT NULL DEFAULT 0 CHECK (failed_count >= 0 AND failed_count <= done),
    error         text,
    locked_until  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    started_at    timestamptz,
    finished_at   timestamptz,
    CHECK ((status IN ('succeeded', 'failed')) = (finished_at IS NOT NULL))
);
CREATE INDEX jobs_runnable_idx ON jobs (created_at) WHERE status IN ('queued', 'running');

-- +goose Down
DROP TABLE jobs, idempotency_records, dead_letters, attempts, deliveries, events, endpoints, api_keys, projects;
