package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/webhookd/webhookd"
)

// IdempotencyKey scopes one guarded request.
type IdempotencyKey struct {
	ProjectID   string
	Key         string
	Fingerprint [32]byte      // SHA-256 of method + path + body
	TTL         time.Duration // how long the record is kept
}

// StoredResponse is the response remembered for an Idempotency-Key.
type StoredResponse struct {
	StatusCode  int
	ContentType string
	Body        []byte
}

// remembered reports whether SPEC §2 keeps this status: 2xx and 4xx but 429.
func (r StoredResponse) remembered() bool {
	return r.StatusCode >= 200 && r.StatusCode < 500 && r.StatusCode != 429
}

// WithIdempotency runs fn at most once per (project, key) and remembers its
// response in the same transaction as the work fn does through its Store.
//
// The record is inserted first in that transaction, so a concurrent repeat
// waits for its row until the first commits (it then replays the stored
// response) or rolls back (it then runs anew). A repeat waits at most wait,
// in turns that hold a connection no longer than maxLockTurn, then fails with idempotency_key_in_progress. A repeat with another
// fingerprint fails with idempotency_key_mismatch. A 4xx response is
// remembered but the work fn did is rolled back; a 429 or 5xx response, or an
// error from fn, rolls back everything and releases the key.
//
// replayed is true when the response is a stored one.
func (db *DB) WithIdempotency(ctx context.Context, k IdempotencyKey, now time.Time, wait time.Duration,
	fn func(s *Store) (StoredResponse, error)) (resp StoredResponse, replayed bool, err error) {
	// A repeat of a request still running waits for its row lock in short
	// turns and holds no connection between them.
	deadline := time.Now().Add(wait)
	pause := 5 * time.Millisecond
	for vanished := 0; ; {
		lockWait := min(time.Until(deadline), maxLockTurn)
		resp, replayed, err = db.tryIdempotent(ctx, k, now, max(lockWait, time.Millisecond), fn)
		switch {
		case errors.Is(err, errRecordVanished) && vanished < 2:
			vanished++
			continue
		case !errors.Is(err, errKeyBusy):
			return resp, replayed, err
		case time.Until(deadline) <= 0:
			return StoredResponse{}, false, &webhookd.Error{Code: webhookd.CodeIdempotencyKeyInProgress,
				Message: "a request with this Idempotency-Key is still in progress; retry later"}
		}
		t := time.NewTimer(min(pause, max(time.Until(deadline), 0)))
		select {
		case <-ctx.Done():
			t.Stop()
			return StoredResponse{}, false, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// maxLockTurn is the longest a repeat waits on the first request's row
// lock while holding a connection; between turns it holds none.
const maxLockTurn = 10 * time.Millisecond

var errKeyBusy = errors.New("idempotency key held by a running request")

var errRecordVanished = errors.New("idempotency record vanished between conflict and read")

func (db *DB) tryIdempotent(ctx context.Context, k IdempotencyKey, now time.Time, lockWait time.Duration,
	fn func(s *Store) (StoredResponse, error)) (StoredResponse, bool, error) {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return StoredResponse{}, false, fmt.Errorf("begin: %w", err)
	}
	defer conn.Release() // pgxpool drops a connection left in a transaction
	tx := &connTx{c: conn}
	defer tx.Rollback(context.WithoutCancel(ctx))

	// Begin, claim the key, waiting at most lockWait for a concurrent
	// holder, and set the savepoint the work runs after (a 4xx can undo the
	// work and keep the record; no lock timeout applies to the work). These
	// travel in front of the work's first round trip; if the key turns out
	// not to be ours, what the work did in between is rolled back unseen.
	var mine bool
	claim := &pgx.Batch{}
	claim.Queue("BEGIN")
	claim.Queue(fmt.Sprintf("SET LOCAL lock_timeout = %d", max(lockWait.Milliseconds(), 1)))
	claim.Queue(claimKeys, []string{k.ProjectID}, []string{k.Key}, [][]byte{k.Fingerprint[:]},
		[]time.Time{now}, []time.Time{now.Add(k.TTL)})
	claim.Queue("SET LOCAL lock_timeout = 0")
	claim.Queue("SAVEPOINT work")
	tx.prefix = claim
	tx.readPrefix = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		var project, key string
		switch err := br.QueryRow().Scan(&project, &key); {
		case errors.Is(err, pgx.ErrNoRows): // someone else's record; the rest runs in vain
		case err != nil:
			return err
		default:
			mine = true
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		_, err := br.Exec()
		return err
	}
	claimed := func() (ok bool, err error) {
		err = tx.sendPrefix(ctx) // no-op when the work's first round trip took it
		switch code, _ := pgCode(err); {
		case code == "55P03": // lock_not_available: the first request is still running
			return false, errKeyBusy
		case err != nil:
			return false, fmt.Errorf("claim idempotency key: %w", err)
		}
		return mine, nil
	}

	// Writes of the work whose results nobody reads travel with the stored
	// response and the commit, in one round trip.
	later := &pgx.Batch{}
	resp, err := fn(&Store{q: tx, tx: tx, later: later, box: db.box})
	switch ok, cerr := claimed(); {
	case cerr != nil:
		return StoredResponse{}, false, cerr
	case !ok:
		tx.Rollback(ctx)
		return db.storedResponse(ctx, k)
	}
	if err != nil || !resp.remembered() {
		return resp, false, err
	}
	if resp.StatusCode >= 400 {
		later = &pgx.Batch{} // the work is undone: its queued writes with it
		later.Queue("ROLLBACK TO SAVEPOINT work")
	}
	later.Queue(`UPDATE idempotency_records SET status_code = $3, content_type = $4, response_body = $5
		WHERE project_id = $1 AND key = $2`, k.ProjectID, k.Key, resp.StatusCode, resp.ContentType, db.box.seal(resp.Body)) // it may hold a secret
	commit := later.Queue("COMMIT")
	var tag pgconn.CommandTag
	commit.Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	if err := tx.SendBatch(ctx, later).Close(); err != nil {
		return StoredResponse{}, false, fmt.Errorf("store idempotent response: %w", err)
	}
	if tag.String() != "COMMIT" {
		return StoredResponse{}, false, fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback)
	}
	tx.committed()
	return resp, false, nil
}

// storedResponse reads a committed record and checks its fingerprint.
func (db *DB) storedResponse(ctx context.Context, k IdempotencyKey) (StoredResponse, bool, error) {
	var (
		fp   []byte
		resp StoredResponse
	)
	err := db.pool.QueryRow(ctx, `SELECT fingerprint, status_code, content_type, response_body
		FROM idempotency_records WHERE project_id = $1 AND key = $2`, k.ProjectID, k.Key,
	).Scan(&fp, &resp.StatusCode, &resp.ContentType, &resp.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return StoredResponse{}, false, errRecordVanished
	}
	if err != nil {
		return StoredResponse{}, false, fmt.Errorf("read idempotency record: %w", err)
	}
	if !bytes.Equal(fp, k.Fingerprint[:]) {
		return StoredResponse{}, false, &webhookd.Error{Code: webhookd.CodeIdempotencyKeyMismatch,
			Message: "this Idempotency-Key was used with a different request; use a new key for a new request"}
	}
	if resp.Body, err = db.box.open(resp.Body); err != nil {
		return StoredResponse{}, false, fmt.Errorf("read idempotency record: %w", err)
	}
	return resp, true, nil
}

// PurgeIdempotencyRecords deletes records that expired before now and
// returns how many went.
func (s *Store) PurgeIdempotencyRecords(ctx context.Context, now time.Time) (int64, error) {
	tag, err := s.q.Exec(ctx, `DELETE FROM idempotency_records WHERE expires_at <= $1`, now)
	if err != nil {
		return 0, fmt.Errorf("purge idempotency records: %w", err)
	}
	return tag.RowsAffected(), nil
}
