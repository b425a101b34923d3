-- +goose Up
ALTER TABLE deliveries DROP CONSTRAINT deliveries_project_id_fkey, DROP CONSTRAINT deliveries_endpoint_id_fkey;
ALTER TABLE events DROP CONSTRAINT events_project_id_fkey;
ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_project_id_fkey;

-- +goose Down
ALTER TABLE deliveries ADD CONSTRAINT deliveries_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects (id) ON DELETE CASCADE,
    ADD CONSTRAINT deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES endpoints (id) ON DELETE CASCADE;
ALTER TABLE events ADD CONSTRAINT events_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects (id) ON DELETE CASCADE;
ALTER TABLE idempotency_records ADD CONSTRAINT idempotency_records_project_id_fkey FOREIGN KEY (project_id) REFERENCES projects (id) ON DELETE CASCADE;
