-- +goose Up
-- An endpoint's filter (SPEC §3 "Filters and transformations"): a JSON
-- object of conditions on an event's type and data, checked by the API when
-- set (package filter); an event of a subscribed type that does not match
-- gets no delivery to the endpoint. NULL: every event of its types.
ALTER TABLE endpoints ADD COLUMN filter jsonb CHECK (filter IS NULL OR jsonb_typeof(filter) = 'object');

-- +goose Down
ALTER TABLE endpoints DROP COLUMN filter;
