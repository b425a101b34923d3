package storage

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// connTx is a transaction on a pooled connection whose BEGIN and COMMIT
// the caller sends itself, in a batch with other statements, saving the
// two round trips pgx's own Begin and Commit take. The caller queues
// "BEGIN" first and calls committed once its batch ending in "COMMIT" went
// through; Rollback is then a no-op. It does not nest.
type connTx struct {
	c      *pgxpool.Conn
	closed bool
}

func (t *connTx) committed() { t.closed = true }

func (t *connTx) Begin(context.Context) (pgx.Tx, error) {
	return nil, errors.New("storage: nested transactions are not supported here")
}

func (t *connTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	tag, err := t.c.Exec(ctx, "COMMIT")
	if err == nil && tag.String() != "COMMIT" {
		return pgx.ErrTxCommitRollback
	}
	return err
}

func (t *connTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	_, err := t.c.Exec(ctx, "ROLLBACK")
	return err
}

func (t *connTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	return t.c.CopyFrom(ctx, table, cols, src)
}

func (t *connTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.c.SendBatch(ctx, b)
}

func (t *connTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t *connTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.c.Conn().Prepare(ctx, name, sql)
}

func (t *connTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.c.Exec(ctx, sql, args...)
}

func (t *connTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.c.Query(ctx, sql, args...)
}

func (t *connTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.c.QueryRow(ctx, sql, args...)
}

func (t *connTx) Conn() *pgx.Conn { return t.c.Conn() }
