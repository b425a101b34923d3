-- +goose Up
-- Deleting an event checks dead_letters for rows that reference it (the
-- foreign key): without this index every event the retention purge
-- removed scanned the whole table.
CREATE INDEX IF NOT EXISTS dead_letters_event_idx ON dead_letters (event_id);

-- +goose Down
DROP INDEX IF EXISTS dead_letters_event_idx;
