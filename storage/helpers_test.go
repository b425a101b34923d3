package storage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// poolOfOne opens a second DB on a migrated test schema whose pool has one
// connection, closed when the test ends: for tests of what must not wait
// for a second connection of its pool.
func poolOfOne(t *testing.T, ctx context.Context) *storage.DB {
	t.Helper()
	return sameSchema(t, ctx, testenv.DB(t), 1)
}

// sameSchema opens another DB (another process's, as it were) on db's
// schema, with a pool of maxConns, closed when the test ends.
func sameSchema(t *testing.T, ctx context.Context, db *storage.DB, maxConns int32) *storage.DB {
	t.Helper()
	var schema string
	if err := db.Pool().QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	return openSchema(t, ctx, schema, maxConns)
}

// openSchema opens a DB on schema as it is (testenv.Schema makes an empty
// one), with a pool of maxConns (0: the default), closed when the test
// ends.
func openSchema(t *testing.T, ctx context.Context, schema string, maxConns int32) *storage.DB {
	t.Helper()
	db, err := storage.Open(ctx, storage.Config{URL: testenv.DatabaseURL(), SearchPath: schema, MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

// newProject makes a project (and an API key) and returns its id.
func newProject(t *testing.T, db *storage.DB) string {
	t.Helper()
	_, p, err := db.Store().CreateAPIKey(context.Background(), "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	return p.ID
}

// oneEndpoint makes a project with one endpoint and returns the project's
// id and a function that makes an event at a time, with one delivery to
// that endpoint, and returns the delivery's id.
func oneEndpoint(t *testing.T, db *storage.DB) (string, func(at time.Time) string) {
	t.Helper()
	ctx, s, project := context.Background(), db.Store(), newProject(t, db)
	if _, err := s.CreateEndpoint(ctx, project, storage.NewEndpoint{URL: "http://127.0.0.1:9/", Secret: "whsec_AAAA"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	return project, func(at time.Time) string {
		t.Helper()
		evs, err := s.CreateEvents(ctx, project, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}}, at,
			func(int) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].Deliveries[0].ID
	}
}
