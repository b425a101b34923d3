package storage

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
)

// DayRows counts the rows of a day's four partitions.
type DayRows struct {
	Events, Deliveries, Attempts, DeadLetters int64
}

// ErrDayChanged is what DropArchivedDay answers for a day whose rows are
// not those archived: its partitions stay, to be archived again.
var ErrDayChanged = errors.New("the day's rows changed since it was archived")

// redactedHeaders matches, case-insensitively, the names of the attempts'
// request and response headers whose values the archive leaves out: those
// that carry a credential, a session or a signature (the endpoints add no
// headers of their own; a receiver's response may set a cookie or echo a
// token).
const redactedHeaders = `authorization|cookie|token|secret|passw|api-?key|apikey|session|signature|credential|x-csrf|x-xsrf`

// redactedParams matches, case-insensitively, the names of the query
// parameters of an attempt's URL whose values the archive leaves out: an
// endpoint URL may carry a token in its query (it never carries user info:
// webhookd.ParseEndpointURL).
const redactedParams = `token|secret|key|sig|auth|pass|session|credential`

// exportQueries are the queries whose rows ExportDay writes, by table (the
// partition's name is %[1]s), one JSON object a row, in the order of the
// partition's primary key or first index.
var exportQueries = map[string]string{
	"events":     `SELECT row_to_json(t) FROM events_%[1]s t ORDER BY id`,
	"deliveries": `SELECT row_to_json(t) FROM deliveries_%[1]s t ORDER BY id`,
	"attempts": `SELECT to_jsonb(t) || jsonb_build_object(
			'url', regexp_replace(t.url, '([?&][^=&#]*(` + redactedParams + `)[^=&#]*=)[^&#]*', '\1[redacted]', 'gi'),
			'request_headers', ` + redact("t.request_headers") + `,
			'response_headers', ` + redact("t.response_headers") + `)
		FROM attempts_%[1]s t ORDER BY delivery_id, number`,
	"dead_letters": `SELECT row_to_json(t) FROM dead_letters_%[1]s t ORDER BY delivery_id, id`,
}

// redact is the SQL of a headers object (jsonb) with the values of
// redactedHeaders replaced by "[redacted]".
func redact(col string) string {
	return `(SELECT coalesce(jsonb_object_agg(k, CASE WHEN k ~* '` + redactedHeaders + `' THEN '"[redacted]"'::jsonb ELSE v END), '{}'::jsonb)
		FROM jsonb_each(CASE WHEN jsonb_typeof(` + col + `) = 'object' THEN ` + col + ` ELSE '{}'::jsonb END) AS h(k, v))`
}

// ExportDay writes the rows of day d's four partitions, one JSON object a
// line, to the writers to gives for each table (events, deliveries,
// attempts, dead_letters, in that order), with the secret-like headers and
// URL query parameters of attempts redacted, and returns how many rows
// each held.
//
// The four are read in one REPEATABLE READ READ ONLY transaction, so they
// are one moment's rows, and stream through COPY: no table is held in
// memory. It takes no lock but the ACCESS SHARE every read takes, which
// blocks no writer (a SHARE lock on a partition would block every UPDATE
// of its parent through a generic plan, as the executor locks all
// partitions). Rows that change meanwhile are what DropArchivedDay's
// counts are for.
func (s *Store) ExportDay(ctx context.Context, d Day, to func(table string) (io.Writer, error)) (DayRows, error) {
	var rows DayRows
	conn, err := s.db.pool.Acquire(ctx)
	if err != nil {
		return rows, fmt.Errorf("export %s: %w", d.Suffix, err)
	}
	defer conn.Release()
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for _, t := range []struct {
			name string
			n    *int64
		}{{"events", &rows.Events}, {"deliveries", &rows.Deliveries}, {"attempts", &rows.Attempts}, {"dead_letters", &rows.DeadLetters}} {
			w, err := to(t.name)
			if err != nil {
				return err
			}
			dec := &copyTextDecoder{w: w}
			tag, err := tx.Conn().PgConn().CopyTo(ctx, dec,
				`COPY (`+fmt.Sprintf(exportQueries[t.name], d.Suffix)+`) TO STDOUT`)
			if err == nil && dec.escape {
				err = errors.New("a row ends in an escape")
			}
			if err != nil {
				return fmt.Errorf("%s_%s: %w", t.name, d.Suffix, err)
			}
			*t.n = tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return rows, fmt.Errorf("export %s: %w", d.Suffix, err)
	}
	return rows, nil
}

// copyTextDecoder undoes the escapes of COPY's text format on its way to
// w. A row is one column of JSON, which has no raw control characters, so
// it only ever meets \\, but it undoes every escape COPY writes.
type copyTextDecoder struct {
	w      io.Writer
	escape bool // the last byte was a backslash that begins an escape
	buf    []byte
}

func (c *copyTextDecoder) Write(p []byte) (int, error) {
	c.buf = c.buf[:0]
	for _, b := range p {
		if !c.escape {
			if b == '\\' {
				c.escape = true
			} else {
				c.buf = append(c.buf, b)
			}
			continue
		}
		c.escape = false
		switch b {
		case 'b':
			b = '\b'
		case 'f':
			b = '\f'
		case 'n':
			b = '\n'
		case 'r':
			b = '\r'
		case 't':
			b = '\t'
		case 'v':
			b = '\v'
		}
		c.buf = append(c.buf, b)
	}
	if _, err := c.w.Write(c.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// countDay counts the rows of day d's partitions, in tx.
func countDay(ctx context.Context, tx pgx.Tx, d Day) (DayRows, error) {
	var r DayRows
	err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM events_%[1]s), (SELECT count(*) FROM deliveries_%[1]s),
		(SELECT count(*) FROM attempts_%[1]s), (SELECT count(*) FROM dead_letters_%[1]s)`, d.Suffix)).
		Scan(&r.Events, &r.Deliveries, &r.Attempts, &r.DeadLetters)
	return r, err
}
