package storage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// AsLeader runs fn unless another process runs the task called name in the
// same schema right now, and tells whether it ran. The turn is a
// transaction-level advisory lock held on one connection for fn's
// duration, so a process that dies gives it up with its connection.
func (db *DB) AsLeader(ctx context.Context, name string, fn func(ctx context.Context) error) (bool, error) {
	var ran bool
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var got bool // the key: 64 bits of md5(schema + name)
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(('x' || substr(md5(current_schema() || $1), 1, 16))::bit(64)::bigint)`,
			name).Scan(&got); err != nil {
			return fmt.Errorf("leader lock %s: %w", name, err)
		}
		if !got {
			return nil
		}
		ran = true
		return fn(ctx)
	})
	return ran, err
}
