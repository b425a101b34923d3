DO $$
DECLARE t record; d date; lo text; hi text;
BEGIN
  FOR t IN SELECT * FROM (VALUES ('events','evt_', ''), ('deliveries','dlv_',' WITH (fillfactor = 40)'), ('attempts','dlv_',''), ('dead_letters','dlv_','')) v(name, prefix, w) LOOP
    EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', t.name, t.name || '_legacy');
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)', t.name, t.name || '_legacy', t.prefix || webhookd_ulid_prefix('2026-11-20 00:00+00'));
    FOR d IN SELECT generate_series('2026-11-20'::date, '2026-12-06'::date, '1 day')::date LOOP
      lo := t.prefix || webhookd_ulid_prefix(d::timestamp AT TIME ZONE 'UTC');
      hi := t.prefix || webhookd_ulid_prefix((d + 1)::timestamp AT TIME ZONE 'UTC');
      EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)%s', t.name || '_p' || to_char(d, 'YYYYMMDD'), t.name, lo, hi, t.w);
    END LOOP;
  END LOOP;
END $$;
