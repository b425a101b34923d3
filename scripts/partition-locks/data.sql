INSERT INTO events (id, project_id, type, data, created_at)
SELECT 'evt_' || webhookd_ulid_prefix(t) || lpad(i::text, 16, '0'), 'prj_1', 'bench', '{"a":1}', t
FROM generate_series('2026-11-20'::date, '2026-12-05'::date, '1 day') d, generate_series(1, 2000) i,
  LATERAL (SELECT d::timestamp AT TIME ZONE 'UTC' + interval '12 hours' AS t) x;
INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, status, created_at, updated_at)
SELECT 'dlv_' || substr(id, 5), project_id, id, 'ep_1', 'bench', 'succeeded', created_at, created_at FROM events;
VACUUM ANALYZE events; VACUUM ANALYZE deliveries;
