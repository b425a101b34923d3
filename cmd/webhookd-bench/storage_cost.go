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

// historyTables are the tables that grow with every delivery; partitioned
// or not, pg_partition_tree lists their leaves (a plain table is its own).
const historyTables = `SELECT relid FROM pg_partition_tree('events') WHERE isleaf
	UNION ALL SELECT relid FROM pg_partition_tree('deliveries') WHERE isleaf
	UNION ALL SELECT relid FROM pg_partition_tree('attempts') WHERE isleaf
	UNION ALL SELECT relid FROM pg_partition_tree('dead_letters') WHERE isleaf`

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
