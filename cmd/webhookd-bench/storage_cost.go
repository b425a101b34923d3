package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// storeMark is what PostgreSQL has written for a run's database at one
// moment: the WAL position and the history tables' sizes (issue 34: bytes
// of table, index and WAL per delivery, before and after partitioning).
type storeMark struct {
	lsn          string
	table, index int64
}

// historyTables are the tables that grow with every delivery, partitioned
// or not: the leaves of each one's partition tree, or the table itself.
var historyTables = leavesOf("'events'") + " UNION ALL " + leavesOf("'deliveries'") + " UNION ALL " +
	leavesOf("'attempts'") + " UNION ALL " + leavesOf("'dead_letters'")

// leavesOf is a query of the relids that hold the rows of the table that
// the SQL expression table names: the leaves of its partition tree, or,
// for a plain table, the table itself (PostgreSQL 15's pg_partition_tree
// lists nothing for a table that is not partitioned).
func leavesOf(table string) string {
	return `SELECT relid FROM pg_partition_tree(` + table + `) WHERE isleaf
		UNION ALL SELECT ` + table + `::regclass WHERE NOT EXISTS (SELECT FROM pg_partition_tree(` + table + `))`
}

// markStore reads the mark of the database at url, after a checkpoint:
// the first change of a page after a checkpoint writes the whole page to
// the WAL, so without one the WAL figure would depend on how long ago the
// last was (a run whose database was just copied from a template starts
// right after one).
func markStore(ctx context.Context, url string) (storeMark, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return storeMark{}, fmt.Errorf("store mark: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `CHECKPOINT`); err != nil {
		return storeMark{}, fmt.Errorf("store mark: %w", err)
	}
	var m storeMark
	err = conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text,
		coalesce(sum(pg_table_size(relid)), 0)::bigint, coalesce(sum(pg_indexes_size(relid)), 0)::bigint
		FROM (`+historyTables+`) t`).Scan(&m.lsn, &m.table, &m.index)
	if err != nil {
		return storeMark{}, fmt.Errorf("store mark: %w", err)
	}
	return m, nil
}

// storeCost is the figures of what was written between before and now
// for n deliveries: WAL (the whole server's: this machine runs one bench
// database at a time), table and index bytes per delivery.
func storeCost(ctx context.Context, url string, before storeMark, n int) ([]figure, error) {
	after, err := markStore(ctx, url)
	if err != nil || n == 0 {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("store cost: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var wal int64
	if err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, after.lsn, before.lsn).Scan(&wal); err != nil {
		return nil, fmt.Errorf("store cost: %w", err)
	}
	per := func(b int64) float64 { return float64(b) / float64(n) }
	return []figure{
		{Name: "WAL bytes per delivery", Unit: bytesUnit, Value: per(wal), Target: info},
		{Name: "table bytes per delivery", Unit: bytesUnit, Value: per(after.table - before.table), Target: info},
		{Name: "index bytes per delivery", Unit: bytesUnit, Value: per(after.index - before.index), Target: info},
	}, nil
}
