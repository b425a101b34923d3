-- +goose Up
-- Every insert into these tables checked its foreign key to projects (and,
-- for deliveries, to endpoints) by locking the parent row FOR KEY SHARE;
-- concurrent ingest transactions all lock the same project and endpoint
-- rows, which PostgreSQL turns into a new MultiXact per locker. Projects
-- and endpoints are never deleted (endpoints are soft-deleted), and every
-- insert takes its ids from rows it just read, so nothing is lost.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_project_id_fkey, DROP CONSTRAINT deliveries_endpoint_id_fkey;
ALTER TABLE events DROP CONSTRAINT events_project_id_fkey;
ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_project_id_fkey;

-- +goose Down
ALTER TABLE deliveries ADD CONSTRAINT deliveries_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects (id) ON DELETE CASCADE,
    ADD CONSTRAINT deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES endpoints (id) ON DELETE CASCADE;
ALTER TABLE events ADD CONSTRAINT events_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects (id) ON DELETE CASCADE;
ALTER TABLE idempotency_records ADD CONSTRAINT idempotency_records_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects (id) ON DELETE CASCADE;
