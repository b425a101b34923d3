package storage_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

func TestMigrateTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	name, _ := testenv.Schema(t)
	ctx := context.Background()
	a, b := openSchema(t, ctx, name, 0), openSchema(t, ctx, name, 0) // two "processes"
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, db := range []*storage.DB{a, b} {
		wg.Go(func() { errs[i] = db.Migrate(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migration %d: %v", i, err)
		}
	}
	if err := a.Migrate(ctx); err != nil {
		t.Fatalf("rerun: %v", err)
	}
	var tables int
	err := a.Pool().QueryRow(ctx, `SELECT count(*) FROM information_schema.tables
		WHERE table_schema = $1 AND table_name IN ('projects','api_keys','endpoints','events','deliveries',
		'attempts','dead_letters','idempotency_records','jobs')`, name).Scan(&tables)
	if err != nil || tables != 9 {
		t.Fatalf("%d of 9 tables (%v)", tables, err)
	}
	// A constraint added NOT VALID (to spare a big table a scan under an
	// exclusive lock) is validated by a later migration.
	var unvalidated []string
	err = a.Pool().QueryRow(ctx, `SELECT coalesce(array_agg(c.conname), '{}') FROM pg_constraint c
		JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1 AND NOT c.convalidated`, name).Scan(&unvalidated)
	if err != nil || len(unvalidated) > 0 {
		t.Fatalf("constraints left unvalidated: %v (%v)", unvalidated, err)
	}
}

func TestConstraintsRefuseImpossibleStates(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	store := db.Store()
	_, p, err := store.CreateAPIKey(ctx, "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	bad := []struct{ name, sql string }{
		{"endpoint with a bad status", `INSERT INTO endpoints (id, project_id, url, secret, status) VALUES ('ep_1', '` + p.ID + `', 'http://x', 'whsec_a', 'paused')`},
		{"disabled endpoint without a reason", `INSERT INTO endpoints (id, project_id, url, secret, status) VALUES ('ep_2', '` + p.ID + `', 'http://x', 'whsec_a', 'disabled')`},
		{"non-http url", `INSERT INTO endpoints (id, project_id, url, secret) VALUES ('ep_3', '` + p.ID + `', 'ftp://x', 'whsec_a')`},
		// (An event's type is the API's to check: migration 10 dropped the
		// constraint that restated it.)
		{"delivery with a bad status", `INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, status) VALUES ('dlv_1', '` + p.ID + `', 'evt_1', 'ep_1', 't', 'done')`},
		{"pending delivery with no next attempt", `INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, status) VALUES ('dlv_2', '` + p.ID + `', 'evt_1', 'ep_1', 't', 'pending')`},
		{"idempotency record of a 500", `INSERT INTO idempotency_records VALUES ('` + p.ID + `', 'k', decode(repeat('00', 32), 'hex'), 500, null, null, now(), now() + interval '1h')`},
		{"idempotency ttl above 72h", `UPDATE projects SET idempotency_ttl_seconds = 300000`},
	}
	for _, c := range bad {
		if _, err := db.Pool().Exec(ctx, c.sql); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

func TestCheckMigrated(t *testing.T) {
	t.Parallel()
	name, _ := testenv.Schema(t)
	ctx := context.Background()
	db := openSchema(t, ctx, name, 0)
	if err := db.CheckMigrated(ctx); err == nil || !strings.Contains(err.Error(), "webhookd migrate") {
		t.Fatalf("an empty schema passed the check: %v", err)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.CheckMigrated(ctx); err != nil {
		t.Fatalf("a migrated schema failed the check: %v", err)
	}
}

// TestConstraintsOfTransformations: canceled is a finished state (nothing
// scheduled), transformation_failed a dead-letter reason, and a
// transformation is never the empty string (NULL is none).
func TestConstraintsOfTransformations(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	store := db.Store()
	_, p, err := store.CreateAPIKey(ctx, "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := store.CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: "https://example.com/x", Secret: "whsec_a"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	evs, err := store.CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: "t", Data: []byte(`{}`)}}, time.Now(), func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	dlv := evs[0].Deliveries[0].ID
	for _, c := range []struct {
		name, sql string
		ok        bool
	}{
		{"canceled and still scheduled", `UPDATE deliveries SET status = 'canceled' WHERE id = '` + dlv + `'`, false},
		{"canceled", `UPDATE deliveries SET status = 'canceled', next_attempt_at = NULL WHERE id = '` + dlv + `'`, true},
		{"dead letter transformation_failed", `INSERT INTO dead_letters (id, project_id, delivery_id, event_id, endpoint_id, event_type, reason)
			VALUES ('dl_1', '` + p.ID + `', '` + dlv + `', '` + evs[0].ID + `', '` + ep.ID + `', 't', 'transformation_failed')`, true},
		{"dead letter of an unknown reason", `UPDATE dead_letters SET reason = 'bored' WHERE id = 'dl_1'`, false},
		{"an empty transformation", `UPDATE endpoints SET transformation = '' WHERE id = '` + ep.ID + `'`, false},
	} {
		if _, err := db.Pool().Exec(ctx, c.sql); (err == nil) != c.ok {
			t.Errorf("%s: error %v, want accepted %v", c.name, err, c.ok)
		}
	}
}
