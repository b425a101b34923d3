package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/webhookd/webhookd"
)

// IdempotencyKey scopes one guarded request.
type IdempotencyKey struct {
	ProjectID   string
	Key         string        // "": the request has no key (a test event), and nothing is remembered
	Fingerprint [32]byte      // SHA-256 of method + path + body
	TTL         time.Duration // how long the record is kept
	// Credential is the requester's API key. A response that carries a
	// secret (StoredResponse.Secret) is stored sealed with a key derived
	// from it, and only a repeat with the same credential can replay it.
	Credential string
}

// StoredResponse is the response remembered for an Idempotency-Key.
type StoredResponse struct {
	StatusCode  int
	ContentType string
	Body        []byte
	// Secret says the body carries a secret (an endpoint's signing
	// secret, a portal link's token): it is stored sealed for the
	// requester (sealForRequester), never readable from the database
	// alone, with or without WEBHOOKD_ENCRYPTION_KEY.
	Secret bool
}

// remembered reports whether SPEC §2 keeps this status: 2xx and 4xx but 429.
func (r StoredResponse) remembered() bool {
	return r.StatusCode >= 200 && r.StatusCode < 500 && r.StatusCode != 429
}

// The claim of a key. A key is claimed by inserting its record, without a
// response, in the transaction that does the request's work; the response
// is written in the same transaction, so a committed record always has
// one. Whoever claims or re-claims a key first takes a transaction-level
// advisory lock on it, and never waits for it: a key another transaction
// holds is reported busy at once, and the request waits holding no
// connection. A complete, live record answers a repeat without any lock.

// claimState is what a claim found for one key.
type claimState int

const (
	claimBusy   claimState = iota // another transaction holds the key: wait and try again
	claimed                       // the key is this transaction's: do the work
	claimStored                   // a complete, live record answers the request
	claimRaced                    // a record committed as the claim ran: try again at once
	// A group's request (writeGroupSQL) also finds:
	claimStale // its project's endpoints changed since they were read: go again
	claimTaken // an external id of its events is taken: go again, knowing it
)

// claimResult is the claim of one key, and the record when it is stored.
type claimResult struct {
	state       claimState
	fingerprint []byte
	resp        StoredResponse
	err         error // the stored response could not be decrypted
}

// claimKey claims one key ($1 project, $2 key, $3 fingerprint, $4 now,
// $5 expiry) and returns its state and, when stored, the record. A record
// that expired is claimed anew. The statement joins nothing and sorts
// nothing (see writeGroupSQL): it is run by every guarded request.
const claimKey = `
	WITH r AS (
		SELECT $1::text AS project_id, $2::text AS key
	), stored AS MATERIALIZED (
		SELECT i.fingerprint, i.status_code, i.content_type, i.response_body
		FROM idempotency_records i
		WHERE i.project_id = $1 AND i.key = $2 AND i.status_code IS NOT NULL AND i.expires_at > $4::timestamptz
	), locked AS MATERIALIZED (
		SELECT r.* FROM r WHERE NOT EXISTS (SELECT FROM stored) AND ` + lockKey + `
	), claim AS (
		INSERT INTO idempotency_records (project_id, key, fingerprint, created_at, expires_at)
		SELECT project_id, key, $3::bytea, $4, $5::timestamptz FROM locked
		ON CONFLICT (project_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
			status_code = NULL, content_type = NULL, response_body = NULL,
			created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
		WHERE idempotency_records.expires_at <= EXCLUDED.created_at
		RETURNING key
	)
	SELECT CASE WHEN EXISTS (SELECT FROM stored) THEN 2 WHEN EXISTS (SELECT FROM claim) THEN 1
			WHEN EXISTS (SELECT FROM locked) THEN 3 ELSE 0 END,
		(SELECT fingerprint FROM stored), (SELECT status_code FROM stored), (SELECT content_type FROM stored),
		(SELECT response_body FROM stored)`

// lockKey takes the advisory lock of the key of row r (r.project_id,
// r.key), never waiting: claimKey and an event group's claim
// (writeGroupSQL) take the same one.
const lockKey = `pg_try_advisory_xact_lock(hashtextextended(r.project_id || '/' || r.key, 0))`

// setStored makes c the claim of a key whose record answers the request:
// its fingerprint, status, content type and sealed body.
func (db *DB) setStored(c *claimResult, fp []byte, status int32, ctype string, body []byte) {
	c.state, c.fingerprint = claimStored, fp
	c.resp = StoredResponse{StatusCode: int(status), ContentType: ctype}
	if c.resp.Body, c.err = db.box.open(body); c.err != nil {
		c.err = fmt.Errorf("read idempotency record: %w", c.err)
	}
}

// replay answers a request from its key's stored record: the response, or
// idempotency_key_mismatch when the record is of another request.
func (c claimResult) replay(k IdempotencyKey) (StoredResponse, error) {
	if c.err != nil {
		return StoredResponse{}, c.err
	}
	if !bytes.Equal(c.fingerprint, k.Fingerprint[:]) {
		return StoredResponse{}, errKeyMismatch()
	}
	resp := c.resp
	var err error
	if resp.Body, err = openForRequester(k, resp.Body); err != nil {
		return StoredResponse{}, err
	}
	return resp, nil
}

func errKeyMismatch() error {
	return &webhookd.Error{Code: webhookd.CodeIdempotencyKeyMismatch,
		Message: "this Idempotency-Key was used with a different request; use a new key for a new request"}
}

func errKeyInProgress() error {
	return &webhookd.Error{Code: webhookd.CodeIdempotencyKeyInProgress,
		Message: "a request with this Idempotency-Key is still in progress; retry later"}
}

// storeResponses writes the responses of claimed keys ($1-$8: the columns
// of idempotency_records, as storedResponses.args gives them). The records
// are the transaction's own: each row finds its record through the key's
// index, with no join for the planner to get wrong while the table is
// young and unanalyzed.
const storeResponses = `
	INSERT INTO idempotency_records (project_id, key, fingerprint, created_at, expires_at,
		status_code, content_type, response_body)
	SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::timestamptz[], $5::timestamptz[],
		$6::int4[], $7::text[], $8::bytea[])
	ON CONFLICT (project_id, key) DO UPDATE SET status_code = EXCLUDED.status_code,
		content_type = EXCLUDED.content_type, response_body = EXCLUDED.response_body`

// storedResponses are responses to remember, as the columns of
// storeResponses.
type storedResponses struct {
	projects, keys, types []string
	fps, bodies           [][]byte
	created, expires      []time.Time
	codes                 []int32
}

func (r *storedResponses) add(k IdempotencyKey, now time.Time, resp StoredResponse, box *secretBox) {
	body := resp.Body
	if resp.Secret {
		body = sealForRequester(k, body)
	}
	r.projects, r.keys = append(r.projects, k.ProjectID), append(r.keys, k.Key)
	r.codes, r.types = append(r.codes, int32(resp.StatusCode)), append(r.types, resp.ContentType)
	r.bodies = append(r.bodies, box.seal(body))
	r.fps, r.created, r.expires = append(r.fps, k.Fingerprint[:]), append(r.created, now), append(r.expires, now.Add(k.TTL))
}

func (r *storedResponses) args() []any {
	return []any{r.projects, r.keys, r.fps, r.created, r.expires, r.codes, r.types, r.bodies}
}

// WithIdempotency runs fn at most once per (project, key) and remembers its
// response in the same transaction as the work fn does through its Store.
// Event requests take the same claim through an Ingester; this is for the
// other guarded routes.
//
// A repeat of a finished request gets the stored response (replayed true),
// or idempotency_key_mismatch when its fingerprint differs. A repeat of a
// request still running waits for it, holding no connection, until wait
// has passed since the call began, then fails with
// idempotency_key_in_progress. A 4xx response is remembered but the work
// fn did is rolled back; a 429 or 5xx response, or an error from fn, rolls
// back everything and releases the key.
func (db *DB) WithIdempotency(ctx context.Context, k IdempotencyKey, now time.Time, wait time.Duration,
	fn func(s *Store) (StoredResponse, error)) (resp StoredResponse, replayed bool, err error) {
	deadline := time.Now().Add(wait)
	for pause := time.Duration(0); ; pause = nextPause(pause) {
		resp, replayed, err = db.tryIdempotent(ctx, k, now, fn)
		if !errors.Is(err, errKeyBusy) {
			return resp, replayed, err
		}
		if !sleepUntil(ctx, pause, deadline) {
			if ctx.Err() != nil {
				return StoredResponse{}, false, ctx.Err()
			}
			return StoredResponse{}, false, errKeyInProgress()
		}
	}
}

var errKeyBusy = errors.New("idempotency key held by a running request")

// nextPause is the wait before the next look at a busy key: 5 ms, doubling
// up to 100 ms.
func nextPause(p time.Duration) time.Duration {
	return min(max(2*p, 5*time.Millisecond), 100*time.Millisecond)
}

// sleepUntil waits pause, or less when deadline comes first; false when
// the deadline has passed or ctx ended.
func sleepUntil(ctx context.Context, pause time.Duration, deadline time.Time) bool {
	left := time.Until(deadline)
	if left <= 0 {
		return false
	}
	t := time.NewTimer(min(pause, left))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (db *DB) tryIdempotent(ctx context.Context, k IdempotencyKey, now time.Time,
	fn func(s *Store) (StoredResponse, error)) (StoredResponse, bool, error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return StoredResponse{}, false, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var (
		c        claimResult
		fp, body []byte
		status   *int32
		ctype    *string
	)
	err = tx.QueryRow(ctx, claimKey, k.ProjectID, k.Key, k.Fingerprint[:], now, now.Add(k.TTL)).
		Scan(&c.state, &fp, &status, &ctype, &body)
	if err != nil {
		return StoredResponse{}, false, fmt.Errorf("claim idempotency key: %w", err)
	}
	if c.state == claimStored {
		db.setStored(&c, fp, *status, *ctype, body)
	}
	switch c.state {
	case claimStored:
		resp, err := c.replay(k)
		return resp, err == nil, err
	case claimBusy, claimRaced:
		return StoredResponse{}, false, errKeyBusy
	}
	// A 4xx undoes the work and keeps the record.
	if _, err := tx.Exec(ctx, "SAVEPOINT work"); err != nil {
		return StoredResponse{}, false, fmt.Errorf("savepoint: %w", err)
	}
	resp, err := fn(&Store{q: tx, tx: tx, db: db, box: db.box})
	if err != nil || !resp.remembered() {
		return resp, false, err
	}
	if resp.StatusCode >= 400 {
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT work"); err != nil {
			return StoredResponse{}, false, fmt.Errorf("undo the work: %w", err)
		}
	}
	if resp.Secret && k.Credential == "" {
		return StoredResponse{}, false, errNoCredential
	}
	var rec storedResponses
	rec.add(k, now, resp, db.box)
	if _, err := tx.Exec(ctx, storeResponses, rec.args()...); err != nil {
		return StoredResponse{}, false, fmt.Errorf("store idempotent response: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return StoredResponse{}, false, fmt.Errorf("commit: %w", err)
	}
	return resp, false, nil
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
