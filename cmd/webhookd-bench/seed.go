package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
)

// seedEndpointID is the one endpoint the scheduled backlog is for.
const seedEndpointID = "ep_bench_scheduled"

// taskTimeout is what webhookd gives one attempt by default (connect 10 s +
// response 30 s + 30 s), so the seeded tasks look like its own.
const taskTimeout = 70 * time.Second

// seedDeliveryID is the i-th seeded delivery's id; the SQL in seedScheduled
// makes the same ones.
func seedDeliveryID(i int) string { return fmt.Sprintf("dlv_%026d", i) }

// seedScheduled writes n events, each with one pending delivery due at due,
// for the project named "bench", straight into PostgreSQL, as if the API
// had accepted them.
func seedScheduled(ctx context.Context, dbURL, endpointURL string, n int, due time.Time) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	key := make([]byte, 32)
	rand.Read(key)
	steps := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO endpoints (id, project_id, url, event_types, secret)
		  SELECT $1, id, $2, '{bench.scheduled}', $3 FROM projects WHERE name = 'bench'`,
			[]any{seedEndpointID, endpointURL, "whsec_" + base64.StdEncoding.EncodeToString(key)}},
		{`INSERT INTO events (id, project_id, type, data)
		  SELECT 'evt_' || lpad(i::text, 26, '0'), e.project_id, 'bench.scheduled', '{}'
		  FROM endpoints e, generate_series(1, $2::int) i WHERE e.id = $1`, []any{seedEndpointID, n}},
		{`INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, status, next_attempt_at)
		  SELECT 'dlv_' || lpad(i::text, 26, '0'), e.project_id, 'evt_' || lpad(i::text, 26, '0'), e.id,
		         'bench.scheduled', 'pending', $3
		  FROM endpoints e, generate_series(1, $2::int) i WHERE e.id = $1`, []any{seedEndpointID, n, due}},
		{`ANALYZE events, deliveries`, nil},
	}
	for _, st := range steps {
		if _, err := conn.Exec(ctx, st.sql, st.args...); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	return nil
}

// enqueueScheduled hands the n seeded deliveries to Redis with webhookd's
// own queue code, in chunks of 1,000 from 8 goroutines.
func enqueueScheduled(ctx context.Context, q *dispatcher.Queue, n int, due time.Time) error {
	const chunk, workers = 1000, 8
	starts := make(chan int, n/chunk+1)
	for i := 1; i <= n; i += chunk {
		starts <- i
	}
	close(starts)
	g, ctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			for start := range starts {
				ds := make([]webhookd.ScheduledDelivery, 0, chunk)
				for i := start; i < start+chunk && i <= n; i++ {
					ds = append(ds, webhookd.ScheduledDelivery{ID: seedDeliveryID(i), EndpointID: seedEndpointID, DueAt: due})
				}
				if err := q.Enqueue(ctx, ds...); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}
