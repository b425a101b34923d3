-- +goose Up
-- Every insert into these tables checked its foreign key to projects (and,
-- for deliveries, to endpoints) by locking the parent row FOR KEY SHARE;
-- concurrent ingest transactions all lock the same project and endpoint
-- rows, which PostgreSQL turns into a new MultiXact per locker. Projects
-- and endpoints are never deleted (endpoints are soft-deleted), and every
-- insert takes its ids from rows it just read, so nothing is lost.
-- A delivery's event is inserted in the same transaction, and retention
-- deletes an event only once it has no deliveries left (the cascade from
-- events never had anything to do), so that key's per-row check goes too.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_project_id_fkey, DROP CONSTRAINT deliveries_endpoint_id_fkey,
    DROP CONSTRAINT deliveries_event_id_fkey;
ALTER TABLE events DROP CONSTRAINT events_project_id_fkey;
ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_project_id_fkey;
-- An attempt is recorded by the statement that updates its leased
-- delivery, and retention deletes a delivery's attempts with it: the
-- per-row check of this key cost more than the attempt's own write.
ALTER TABLE attempts DROP CONSTRAINT attempts_delivery_id_fkey;

-- Every delivery is written three times (made, leased, recorded), and
-- each write that is not HOT adds an entry to every index. The unique
-- (event_id, endpoint_id) index already serves lookups by event_id.
DROP INDEX deliveries_event_idx;
-- A delivery ends succeeded far more often than anything else, and each
-- status change adds an entry to every status index. The status indexes
-- keep the rarer statuses only; a filter on succeeded walks an id-ordered
-- index, where most rows match.
DROP INDEX deliveries_project_status_idx, deliveries_status_idx;
CREATE INDEX deliveries_project_status_idx ON deliveries (project_id, status, id DESC) WHERE status <> 'succeeded';
CREATE INDEX deliveries_status_idx ON deliveries (status, id DESC) WHERE status <> 'succeeded';
-- Room on each page, so that a lease (owner and expiry, no indexed
-- column) is a HOT update that touches no index.
ALTER TABLE deliveries SET (fillfactor = 80);

-- +goose Down
ALTER TABLE deliveries RESET (fillfactor);
DROP INDEX deliveries_project_status_idx, deliveries_status_idx;
CREATE INDEX deliveries_project_status_idx ON deliveries (project_id, status, id DESC);
CREATE INDEX deliveries_status_idx ON deliveries (status, id DESC);
CREATE INDEX deliveries_event_idx ON deliveries (event_id);
ALTER TABLE deliveries ADD CONSTRAINT deliveries_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects (id) ON DELETE CASCADE,
    ADD CONSTRAINT deliveries_event_id_fkey FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE CASCADE,
    ADD CONSTRAINT deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES endpoints (id) ON DELETE CASCADE;
ALTER TABLE events ADD CONSTRAINT events_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects (id) ON DELETE CASCADE;
ALTER TABLE idempotency_records ADD CONSTRAINT idempotency_records_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects (id) ON DELETE CASCADE;
ALTER TABLE attempts ADD CONSTRAINT attempts_delivery_id_fkey FOREIGN KEY (delivery_id) REFERENCES deliveries (id) ON DELETE CASCADE;
