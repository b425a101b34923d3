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
	// prefix, when set, holds statements (BEGIN and the idempotency
	// claim) that travel in front of the transaction's first round trip;
	// readPrefix reads their results, which come first.
	prefix     *pgx.Batch
	readPrefix func(pgx.BatchResults) error
	prefixErr  error // what readPrefix returned
}

// sendPrefix sends the statements still waiting in front of the
// transaction alone, when no other round trip took them.
func (t *connTx) sendPrefix(ctx context.Context) error {
	if t.prefix == nil {
		return t.prefixErr
	}
	b := t.prefix
	t.prefix = nil
	br := t.c.SendBatch(ctx, b)
	t.prefixErr = t.readPrefix(br)
	if err := br.Close(); t.prefixErr == nil {
		t.prefixErr = err
	}
	return t.prefixErr
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
	if err := t.sendPrefix(ctx); err != nil {
		return 0, err
	}
	return t.c.CopyFrom(ctx, table, cols, src)
}

// SendBatch sends b; the statements waiting in front of the transaction,
// if any, travel in the same round trip, and their results are read before
// b's are handed back.
func (t *connTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.prefix == nil {
		if t.prefixErr != nil {
			return failedBatch{t.prefixErr}
		}
		return t.c.SendBatch(ctx, b)
	}
	both := &pgx.Batch{QueuedQueries: append(t.prefix.QueuedQueries[:len(t.prefix.QueuedQueries):len(t.prefix.QueuedQueries)], b.QueuedQueries...)}
	t.prefix = nil
	br := t.c.SendBatch(ctx, both)
	if t.prefixErr = t.readPrefix(br); t.prefixErr != nil {
		br.Close()
		return failedBatch{t.prefixErr}
	}
	return br
}

// failedBatch is the result of a batch that could not run.
type failedBatch struct{ err error }

func (f failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failedBatch) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failedBatch) QueryRow() pgx.Row                { return failedRow(f) }
func (f failedBatch) Close() error                     { return f.err }
func (f failedBatch) Tx() pgx.Tx                       { return nil }

type failedRow struct{ err error }

func (f failedRow) Scan(...any) error { return f.err }

func (t *connTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t *connTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.c.Conn().Prepare(ctx, name, sql)
}

func (t *connTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.sendPrefix(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.c.Exec(ctx, sql, args...)
}

func (t *connTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.sendPrefix(ctx); err != nil {
		return nil, err
	}
	return t.c.Query(ctx, sql, args...)
}

func (t *connTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.sendPrefix(ctx); err != nil {
		return failedRow{err}
	}
	return t.c.QueryRow(ctx, sql, args...)
}

func (t *connTx) Conn() *pgx.Conn { return t.c.Conn() }
