package storage_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestGenericPlansOfAYoungTableUseItsIndex: on a new, empty, unanalyzed
// deliveries table, the generic plan of a join by id (what the attempt
// records run) scans the table by default; under PlanSettings it looks rows
// up by the primary key, so it stays cheap as the table grows.
func TestGenericPlansOfAYoungTableUseItsIndex(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	const join = `EXPLAIN EXECUTE byid('{dlv_1,dlv_2}')`
	plan := func(settings string) string {
		t.Helper()
		var out []string
		err := pgx.BeginFunc(ctx, db.Pool(), func(tx pgx.Tx) error {
			if settings != "" {
				if _, err := tx.Exec(ctx, settings); err != nil {
					return err
				}
			} else if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `PREPARE byid(text[]) AS
				SELECT d.id FROM unnest($1::text[]) AS r(id) JOIN deliveries d ON d.id = r.id`); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, join)
			if err != nil {
				return err
			}
			if out, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `DEALLOCATE byid`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, "\n")
	}
	if p := plan(""); !strings.Contains(p, "Seq Scan on deliveries") {
		t.Logf("the default generic plan no longer scans a young table (PostgreSQL changed?):\n%s", p)
	}
	// deliveries is partitioned (migration 25): each partition's own key.
	if p := plan(storage.PlanSettings); strings.Contains(p, "Seq Scan on deliveries") || !strings.Contains(p, "deliveries_legacy_pkey") {
		t.Fatalf("under PlanSettings the generic plan does not use the primary key:\n%s", p)
	}
}
