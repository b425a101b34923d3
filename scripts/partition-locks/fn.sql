CREATE OR REPLACE FUNCTION webhookd_ulid_prefix(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT string_agg(substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ',
        ((floor(extract(epoch FROM t) * 1000)::bigint >> (5 * (9 - i))) & 31)::int + 1, 1), '' ORDER BY i)
    FROM generate_series(0, 9) AS i
$$;
