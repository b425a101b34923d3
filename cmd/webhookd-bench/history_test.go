package main

import (
	"context"
	"testing"

	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestGenerateHistory: a small history lands whole in its days'
// partitions (none in the default ones), with its dead letters and every
// attempt, and webhookd reads it back (a delivery by id, with its event).
func TestGenerateHistory(t *testing.T) {
	t.Parallel()
	name, dbURL := testenv.Schema(t)
	ctx := context.Background()
	db, err := storage.Open(ctx, storage.Config{URL: testenv.DatabaseURL(), SearchPath: name})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	_, p, err := db.Store().CreateAPIKey(ctx, "bench", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	if err := generateHistory(ctx, dbURL, n, 3); err != nil {
		t.Fatal(err)
	}
	var events, deliveries, attempts, dead, stray, days int
	if err := db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM deliveries),
		(SELECT count(*) FROM attempts), (SELECT count(*) FROM dead_letters),
		(SELECT count(*) FROM deliveries_default) + (SELECT count(*) FROM events_default) + (SELECT count(*) FROM attempts_default),
		(SELECT count(DISTINCT tableoid) FROM deliveries)`).Scan(&events, &deliveries, &attempts, &dead, &stray, &days); err != nil {
		t.Fatal(err)
	}
	// Of 500 events, 5 dead-lettered (5 attempts), 15 at the second attempt.
	if events != n/2 || deliveries != n || dead != 10 || attempts != 2*(5*5+15*2+480) || stray != 0 || days < 3 {
		t.Fatalf("%d events, %d deliveries, %d attempts, %d dead letters, %d rows in default partitions, %d days",
			events, deliveries, attempts, dead, stray, days)
	}
	var id string
	if err := db.Pool().QueryRow(ctx, `SELECT id FROM deliveries ORDER BY id LIMIT 1`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if d, err := db.Store().GetDelivery(ctx, p.ID, id); err != nil || d.AttemptsCount != 5 {
		t.Fatalf("the first delivery (a dead letter's): %+v, %v", d, err)
	}
}
