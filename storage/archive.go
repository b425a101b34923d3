package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ArchiveTables are the history tables an archive holds, in the order
// ArchiveRows reads them.
var ArchiveTables = []string{"events", "deliveries", "attempts", "dead_letters"}

// secretHeader matches (lowercased) the header names whose values are
// credentials: the signature webhookd sent, and whatever a receiver's
// answer carried as a cookie or a token. An archive leaves them out.
const secretHeader = `'(signature|authorization|cookie|token|secret|api-?key|password)'`

// archiveHeaders is the SQL of a headers column without its secret
// headers.
func archiveHeaders(col string) string {
	return `(SELECT coalesce(jsonb_object_agg(h.key, h.value), '{}'::jsonb) FROM jsonb_each(` + col + `) h
		WHERE lower(h.key) !~ ` + secretHeader + `)`
}

// archiveQueries select, per table, the rows of [$1, $2) as JSON objects
// of the columns an archive keeps, by an allowlist: an event and a
// delivery by the time of their id (idBound: ids are ULIDs), a delivery's
// attempts and dead letter with their delivery, wherever their own times
// fall. A range of id times is what a day's partitions hold (migration
// 25), so the archive of a day is exactly the partitions retention drops
// after it.
//
// Left out: endpoint secrets, keys, portal tokens and idempotency records
// (other tables); the signature and credential headers of attempts
// (secretHeader), and the signature wherever a receiver echoed it in its
// response body; an attempt's URL but for its origin (scheme, host and
// port), as a chat service's webhook URL carries its token in its path or
// query — the delivery's endpoint_id names the endpoint, which is all a
// replay needs; and a delivery's lease and pending-redelivery columns,
// which mean nothing once it is archived.
var archiveQueries = map[string]string{
	"events": `SELECT json_build_object('id', id, 'project_id', project_id, 'type', type, 'data', data,
			'external_id', external_id, 'created_at', created_at, 'trace_parent', trace_parent)::text
		FROM events WHERE id >= $1 AND id < $2 ORDER BY id`,
	"deliveries": `SELECT json_build_object('id', id, 'project_id', project_id, 'event_id', event_id,
			'endpoint_id', endpoint_id, 'event_type', event_type, 'status', status, 'trigger', trigger,
			'attempts_count', attempts_count, 'auto_attempts', auto_attempts, 'next_attempt_at', next_attempt_at,
			'waiting_reason', waiting_reason, 'last_status_code', last_status_code, 'last_error', last_error,
			'created_at', created_at, 'updated_at', updated_at)::text
		FROM deliveries WHERE id >= $1 AND id < $2 ORDER BY id`,
	"attempts": `SELECT json_build_object('delivery_id', a.delivery_id, 'number', a.number, 'request_id', a.request_id,
			'origin', regexp_replace(substring(a.url from '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*'), '//[^@]*@', '//'),
			'trigger', a.trigger, 'status_code', a.status_code, 'error', a.error, 'duration_ms', a.duration_ms,
			'started_at', a.started_at, 'request_headers', ` + archiveHeaders("a.request_headers") + `,
			'response_headers', ` + archiveHeaders("a.response_headers") + `, 'response_body', replace(a.response_body, coalesce(a.request_headers->>'Webhook-Signature', ''), '[signature removed]'),
			'trace_id', a.trace_id)::text
		FROM attempts a WHERE a.delivery_id >= $1 AND a.delivery_id < $2 ORDER BY a.delivery_id, a.number, a.started_at`,
	"dead_letters": `SELECT json_build_object('id', l.id, 'project_id', l.project_id, 'delivery_id', l.delivery_id,
			'event_id', l.event_id, 'endpoint_id', l.endpoint_id, 'event_type', l.event_type, 'reason', l.reason,
			'last_status_code', l.last_status_code, 'dead_lettered_at', l.dead_lettered_at,
			'replayed_at', l.replayed_at, 'replayed_by', l.replayed_by)::text
		FROM dead_letters l WHERE l.delivery_id >= $1 AND l.delivery_id < $2 ORDER BY l.id`,
}

// ArchiveRows calls fn with every row of the history of [from, to), table
// by table in the order of ArchiveTables, each row one JSON object of the
// columns an archive keeps (see archiveQueries: no secret among them). All
// four tables are read in one snapshot, so the attempts and dead letters
// are those of the deliveries read. row is valid only during the call.
func (db *DB) ArchiveRows(ctx context.Context, from, to time.Time, fn func(table string, row []byte) error) error {
	tx, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("archive rows: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	for _, table := range ArchiveTables {
		prefix := prefixDelivery // attempts and dead letters by their delivery's id
		if table == "events" {
			prefix = prefixEvent
		}
		rows, err := tx.Query(ctx, archiveQueries[table], idBound(prefix, from), idBound(prefix, to))
		if err != nil {
			return fmt.Errorf("archive %s: %w", table, err)
		}
		for rows.Next() {
			if err := fn(table, rows.RawValues()[0]); err != nil {
				rows.Close()
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("archive %s: %w", table, err)
		}
	}
	return tx.Commit(ctx)
}
