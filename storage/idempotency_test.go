package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestIdempotencyLeavesNoTransactionOpen: whatever the outcome (committed,
// a remembered 4xx, a forgotten 5xx, an error, a replay, a mismatch), the
// transaction WithIdempotency begins by hand is ended and its connection
// is not left idle in it.
func TestIdempotencyLeavesNoTransactionOpen(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	project := newProject(t, db)
	now := time.Now()
	key := func(name string, body byte) storage.IdempotencyKey {
		return storage.IdempotencyKey{ProjectID: project, Key: name, TTL: time.Hour, Fingerprint: [32]byte{body}}
	}
	answer := func(status int, err error) func(*storage.Store) (storage.StoredResponse, error) {
		return func(*storage.Store) (storage.StoredResponse, error) {
			return storage.StoredResponse{StatusCode: status, ContentType: "application/json", Body: []byte("{}")}, err
		}
	}
	boom := errors.New("boom")
	for _, c := range []struct {
		key     storage.IdempotencyKey
		fn      func(*storage.Store) (storage.StoredResponse, error)
		wantErr bool
	}{
		{key("ok", 1), answer(202, nil), false},
		{key("ok", 1), answer(202, nil), false}, // a replay
		{key("ok", 2), answer(202, nil), true},  // a mismatch
		{key("bad", 1), answer(400, nil), false},
		{key("down", 1), answer(503, nil), false},
		{key("err", 1), answer(0, boom), true},
	} {
		if _, _, err := db.WithIdempotency(ctx, c.key, now, time.Second, c.fn); (err != nil) != c.wantErr {
			t.Fatalf("%s: err %v", c.key.Key, err)
		}
	}
	var open int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = current_setting('application_name') AND state LIKE 'idle in transaction%'`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != 0 {
		t.Fatalf("%d connections left idle in a transaction", open)
	}
	var stored int
	db.Pool().QueryRow(ctx, `SELECT count(*) FROM idempotency_records WHERE status_code IS NOT NULL`).Scan(&stored)
	if stored != 2 { // ok (202) and bad (400); 503 and the error are forgotten
		t.Fatalf("%d records stored, want 2", stored)
	}
}

// TestIdempotentRepeatWaitsWithoutAConnection: a repeat of a request still
// running waits for it and replays its response, and holds no pool
// connection while it waits (SPEC §2; issue 10).
func TestIdempotentRepeatWaitsWithoutAConnection(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	project := newProject(t, db)
	k := storage.IdempotencyKey{ProjectID: project, Key: "slow", TTL: time.Hour, Fingerprint: [32]byte{1}}
	inside, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, _, err := db.WithIdempotency(ctx, k, time.Now(), time.Second, func(s *storage.Store) (storage.StoredResponse, error) {
			// A statement of the work, so the claim has gone out with it.
			if _, err := s.ProjectByAPIKey(ctx, "no such key"); !errors.Is(err, webhookd.ErrNotFound) {
				return storage.StoredResponse{}, err
			}
			close(inside)
			<-release
			return storage.StoredResponse{StatusCode: 202, ContentType: "application/json", Body: []byte(`{"n":1}`)}, nil
		})
		first <- err
	}()
	<-inside
	type answer struct {
		resp     storage.StoredResponse
		replayed bool
		err      error
	}
	second := make(chan answer, 1)
	go func() {
		resp, replayed, err := db.WithIdempotency(ctx, k, time.Now(), 10*time.Second, func(*storage.Store) (storage.StoredResponse, error) {
			return storage.StoredResponse{StatusCode: 202, Body: []byte(`{"n":2}`)}, nil
		})
		second <- answer{resp, replayed, err}
	}()
	// While the repeat waits, only the first request's connection is
	// taken but for the repeat's looks: sample the pool for a while.
	deadline := time.Now().Add(500 * time.Millisecond)
	var samples, busy int
	for time.Now().Before(deadline) {
		samples++
		if db.Pool().Stat().AcquiredConns() > 1 {
			busy++
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	a := <-second
	if a.err != nil || !a.replayed || string(a.resp.Body) != `{"n":1}` {
		t.Fatalf("repeat: %+v, want a replay of the first response", a)
	}
	// A repeat that held a connection through its wait would be seen in
	// every sample; one that looks again now and then, in the samples of
	// its looks, which a loaded machine (the whole suite under -race) makes
	// longer: as many as half were seen in CI.
	if busy*10 > samples*9 {
		t.Fatalf("the waiting repeat held a connection in %d of %d samples", busy, samples)
	}
}

// TestIdempotentKeyLifecycle: a guarded request's key is claimed and its
// work done once; a repeat within the TTL is answered by the record (its
// work not run), a repeat with another body is a mismatch, and once the
// record has expired the key is claimed anew and the work runs again.
func TestIdempotentKeyLifecycle(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	project := newProject(t, db)
	runs := 0
	work := func(*storage.Store) (storage.StoredResponse, error) {
		runs++
		return storage.StoredResponse{StatusCode: 201, ContentType: "application/json", Body: []byte{'0' + byte(runs)}}, nil
	}
	k := storage.IdempotencyKey{ProjectID: project, Key: "k", TTL: time.Hour, Fingerprint: [32]byte{1}}
	t0 := time.Now()
	for _, c := range []struct {
		name         string
		at           time.Time
		fp           byte
		wantBody     string
		wantReplayed bool
		wantErr      string
	}{
		{"first", t0, 1, "1", false, ""},
		{"repeat", t0.Add(59 * time.Minute), 1, "1", true, ""},
		{"other body", t0.Add(59 * time.Minute), 2, "", false, webhookd.CodeIdempotencyKeyMismatch},
		{"after the TTL", t0.Add(61 * time.Minute), 2, "2", false, ""},
		{"repeat of the new one", t0.Add(62 * time.Minute), 2, "2", true, ""},
	} {
		k.Fingerprint = [32]byte{c.fp}
		resp, replayed, err := db.WithIdempotency(ctx, k, c.at, time.Second, work)
		var we *webhookd.Error
		switch {
		case c.wantErr != "":
			if !errors.As(err, &we) || we.Code != c.wantErr {
				t.Fatalf("%s: err %v, want %s", c.name, err, c.wantErr)
			}
		case err != nil:
			t.Fatalf("%s: %v", c.name, err)
		case string(resp.Body) != c.wantBody || replayed != c.wantReplayed || resp.StatusCode != 201:
			t.Fatalf("%s: %d %q replayed %v, want %q replayed %v", c.name, resp.StatusCode, resp.Body, replayed,
				c.wantBody, c.wantReplayed)
		}
	}
	if runs != 2 {
		t.Fatalf("the work ran %d times, want 2", runs)
	}
}
