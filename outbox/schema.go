package outbox

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Version is the version of the table's contract (schema.sql): its
// columns, their meaning and the refused rows' table. A change that a
// service's INSERTs could notice gets a new version.
const Version = 1

//go:embed schema.sql
var schemaSQL string

// Table is the outbox table's name; Channel is what its trigger notifies.
const (
	Table   = "webhookd_outbox"
	Channel = "webhookd_outbox"
)

// initLock serialises Init's runs on one database: two CREATE TABLE IF
// NOT EXISTS at once can both find no table, and one fails.
const initLock = `SELECT pg_advisory_xact_lock(hashtextextended('webhookd_outbox init', 0))`

// Init creates the outbox tables and trigger in the database conn is on
// (in its search_path's first schema), or brings them to this version:
// safe to run twice, and from two places at once. It gives a new table its
// source id (sourceID), which a table dropped and made again never shares.
func Init(ctx context.Context, conn *pgx.Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outbox init: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, initLock); err != nil {
		return fmt.Errorf("outbox init: %w", err)
	}
	if _, err := tx.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("outbox init: %w", err)
	}
	if _, err := readSourceID(ctx, tx); err != nil {
		comment := fmt.Sprintf("webhookd outbox, contract version %d; source %s (keep: webhookd's idempotency keys for these rows include it)",
			Version, uuid.NewString())
		if _, err := tx.Exec(ctx, "COMMENT ON TABLE webhookd_outbox IS "+quote(comment)); err != nil {
			return fmt.Errorf("outbox init: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("outbox init: %w", err)
	}
	return nil
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

var sourcePattern = regexp.MustCompile(`source ([0-9a-f-]{36})`)

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// errNoSourceID is a table whose comment lost its source id.
var errNoSourceID = fmt.Errorf("webhookd_outbox has no source id in its comment: run `webhookd outbox init` on this database")

// readSourceID returns the outbox table's source id, from its comment: a
// UUID made when Init created the table. Row ids start again in a table
// made again; with the source id in every row's key, a new row never
// meets the idempotency record of an old one with its id.
func readSourceID(ctx context.Context, q querier) (string, error) {
	var comment *string
	if err := q.QueryRow(ctx, `SELECT obj_description('webhookd_outbox'::regclass, 'pg_class')`).Scan(&comment); err != nil {
		return "", err
	}
	if comment == nil {
		return "", errNoSourceID
	}
	m := sourcePattern.FindStringSubmatch(*comment)
	if m == nil {
		return "", errNoSourceID
	}
	return m[1], nil
}
