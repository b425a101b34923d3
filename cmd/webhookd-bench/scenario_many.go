package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
)

// manyBatch is the batch size of the many-endpoints scenario's posts.
const manyBatch = 1000

// manyEndpointsScenario: one event to each of very many endpoints, so the
// worker meets each endpoint once (issue 20, target 6): its per-endpoint
// state (the adaptive limit) must keep memory bounded.
var manyEndpointsScenario = scenario{
	Name: "many-endpoints",
	Title: func(o *Options) string {
		return fmt.Sprintf("%s instant endpoints, written straight into PostgreSQL (the API would take minutes), each "+
			"at its own receiver path; one event each, addressed by endpoint_ids, in batches of %d by 4 clients; "+
			"throughput from the first POST to the last receipt, and webhookd's peak RSS",
			thousands(float64(o.ManyEndpoints)), manyBatch)
	},
	Run: runManyEndpoints,
}

// manyEndpointID is the i-th seeded endpoint's id; the SQL in
// seedEndpoints makes the same ones.
func manyEndpointID(i int) string { return fmt.Sprintf("ep_bench_many_%d", i) }

func manyName(i int) string { return fmt.Sprintf("m%d", i) }

func runManyEndpoints(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := prepareStack(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	names := make([]string, o.ManyEndpoints)
	for i := range names {
		names[i] = manyName(i)
		s.recv.Add(names[i], instant)
	}
	if err := seedEndpoints(ctx, s.db.URL, s.recv.URL+"/r/m", o.ManyEndpoints); err != nil {
		return result{}, err
	}
	if err := s.start(ctx); err != nil {
		return result{}, err
	}
	l := &ledger{}
	if err := postToEach(ctx, s.api, l, o.ManyEndpoints); err != nil {
		return result{}, err
	}
	if err := waitDelivered(ctx, s.recv, names, l.Expected(), o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	st := l.Stats(s.recv)
	common, err := s.common(st, none())
	if err != nil {
		return result{}, err
	}
	figs := append(throughputFigures(st, info),
		figure{Name: "endpoints delivered to", Unit: count, Value: float64(s.recv.Distinct(names)), Target: info})
	return result{Figures: append(figs, common...)}, nil
}

// postToEach posts one event to each of the n seeded endpoints, in batches
// of manyBatch from 4 clients, and writes each into l with its endpoint.
func postToEach(ctx context.Context, api *apiClient, l *ledger, n int) error {
	starts := make(chan int, n/manyBatch+1)
	for i := 0; i < n; i += manyBatch {
		starts <- i
	}
	close(starts)
	g, ctx := errgroup.WithContext(ctx)
	for range 4 {
		g.Go(func() error {
			for from := range starts {
				to := min(from+manyBatch, n)
				evs := make([]eventIn, 0, to-from)
				for i := from; i < to; i++ {
					evs = append(evs, eventIn{Type: "bench.many", Data: map[string]int{"n": i},
						EndpointIDs: []string{manyEndpointID(i)}})
				}
				l.Start()
				ids, at, err := api.PostBatch(ctx, evs)
				if errors.Is(err, errRefused) {
					continue
				}
				if err != nil {
					return err
				}
				for k, id := range ids {
					l.Accept([]string{id}, at, []string{manyName(from + k)})
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// seedEndpoints writes n endpoints of the project "bench", the i-th at
// urlPrefix+i (receiver path m<i>), subscribed to a type no event has.
func seedEndpoints(ctx context.Context, dbURL, urlPrefix string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("seed endpoints: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	key := make([]byte, 32)
	rand.Read(key)
	_, err = conn.Exec(ctx, `INSERT INTO endpoints (id, project_id, url, event_types, secret)
		SELECT 'ep_bench_many_' || i, p.id, $1 || i, '{bench.many.none}', $2
		FROM projects p, generate_series(0, $3::int - 1) i WHERE p.name = 'bench'`,
		urlPrefix, "whsec_"+base64.StdEncoding.EncodeToString(key), n)
	if err != nil {
		return fmt.Errorf("seed endpoints: %w", err)
	}
	_, err = conn.Exec(ctx, `ANALYZE endpoints`)
	return err
}
