-- +goose Up
-- A delivery is written three times close together: made, leased (a HOT
-- update, no index touched, while its page has room) and recorded (a new
-- version, on the same page when there is room). At fillfactor 80 a page
-- of new deliveries ran out of room before their leases: in the ingest
-- benchmark 30% of the leases were not HOT, and each added an entry to
-- all eight indexes. At 50 all but 1% are HOT, and the table is no larger
-- (10 MB for 20,000 deliveries either way): the room a page keeps is what
-- the lease and record versions fill, and pruning gives it back after.
ALTER TABLE deliveries SET (fillfactor = 50);

-- +goose Down
ALTER TABLE deliveries SET (fillfactor = 80);
