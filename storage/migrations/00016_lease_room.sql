-- +goose Up
-- More room per page for the lease version (see 00009_claim_room). Since a
-- lease names its worker (lease_worker, 00013), the lease version is about
-- 30 bytes larger, and at fillfactor 50 a page of new deliveries again ran
-- out of room before their leases: in the ingest-batch and burst
-- benchmarks about one lease in ten was not HOT, so it added an entry to
-- every index of deliveries and most of the claims' WAL. At 40 all but
-- about 1% are HOT again.
ALTER TABLE deliveries SET (fillfactor = 40);

-- +goose Down
ALTER TABLE deliveries SET (fillfactor = 50);
