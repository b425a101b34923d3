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

// circuitRestProbeIn is how far ahead the seeded circuits' probes are: well
// past the measurement, so nothing is due while webhookd is at rest.
const circuitRestProbeIn = 10 * time.Minute

// circuitRestSettle is how long webhookd runs before the measurement: its
// start-up work (the first reconciler pass, the first heartbeats) is not
// rest.
const circuitRestSettle = 5 * time.Second

// circuitRestScenario: a large backlog parked behind open circuits (SPEC
// §1: "a backlog waiting for one busy or broken endpoint costs nothing per
// waiting delivery per second"). It measures webhookd's CPU while nothing
// is due.
var circuitRestScenario = scenario{
	Name: "circuit-rest",
	Title: func(o *Options) string {
		return fmt.Sprintf("%s endpoints with open circuits (probe %s ahead) and %s deliveries waiting for them "+
			"(waiting_reason circuit_open, next_attempt_at at the end of their window), written straight into "+
			"PostgreSQL, with their wake-ups and each circuit's probe enqueued with dispatcher.Queue, as webhookd would have left them (the API would "+
			"need a failing receiver and minutes); webhookd all's CPU over %s idle before they are written, then, "+
			"%s after, over %s at rest with them, and the whole PostgreSQL server's",
			thousands(float64(o.RestEndpoints)), circuitRestProbeIn, thousands(float64(o.RestDeliveries)),
			o.RestDuration, circuitRestSettle, o.RestDuration)
	},
	Run: runCircuitRest,
}

func runCircuitRest(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := prepareStack(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	// Every endpoint at one receiver path: a request there is an attempt
	// made at rest, which the figures count.
	url := s.recv.Add("parked", instant)
	if err := s.start(ctx); err != nil {
		return result{}, err
	}
	// First webhookd idle with nothing waiting, then with the backlog
	// parked: the difference is what the backlog costs at rest.
	idle, _, err := measureRest(ctx, s, o.RestDuration)
	if err != nil {
		return result{}, err
	}
	probeAt := time.Now().Add(circuitRestProbeIn).UTC().Truncate(time.Microsecond)
	start := time.Now()
	if err := seedOpenCircuits(ctx, s.db.URL, url, o.RestEndpoints, o.RestDeliveries, probeAt); err != nil {
		return result{}, err
	}
	if err := enqueueParked(ctx, dispatcher.NewQueue(s.redis.Client, "", taskTimeout), o.RestEndpoints,
		o.RestDeliveries, probeAt); err != nil {
		return result{}, err
	}
	progress("  seeded %s open circuits and %s waiting deliveries in %s", thousands(float64(o.RestEndpoints)),
		thousands(float64(o.RestDeliveries)), time.Since(start).Round(100*time.Millisecond))
	parked, pgShare, err := measureRest(ctx, s, o.RestDuration)
	if err != nil {
		return result{}, err
	}
	waiting, err := countParked(ctx, s.db.URL)
	if err != nil {
		return result{}, err
	}
	if err := s.proc.Exited(); err != nil {
		return result{}, err
	}
	rss, err := s.peakRSS()
	if err != nil {
		return result{}, err
	}
	figs := []figure{
		{Name: "webhookd CPU at rest (% of one core)", Unit: percent, Value: parked, Target: below(5, percent)},
		{Name: "webhookd CPU idle, before the backlog (% of one core)", Unit: percent, Value: idle, Target: info},
		{Name: "PostgreSQL CPU at rest (whole server, % of one core)", Unit: percent, Value: pgShare, Target: info},
		{Name: "requests made at rest", Unit: count, Value: float64(s.recv.Distinct([]string{"parked"})), Target: none()},
		{Name: "deliveries no longer waiting for their circuit", Unit: count, Value: float64(o.RestDeliveries - waiting),
			Target: none()},
		rss,
	}
	return result{Figures: figs}, nil
}

// measureRest lets webhookd settle, then returns its CPU and the whole
// PostgreSQL server's (NaN when it is not local) over d, in per cent of
// one core.
func measureRest(ctx context.Context, s *stack, d time.Duration) (webhookdShare, pgShare float64, err error) {
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(circuitRestSettle):
	}
	cpu0, err := s.proc.CPUTime()
	if err != nil {
		return 0, 0, err
	}
	pg0, pgErr := serverCPUTime(s.pgPID)
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(d):
	}
	cpu1, err := s.proc.CPUTime()
	if err != nil {
		return 0, 0, err
	}
	wall := time.Since(t0).Seconds()
	pgShare = nan
	if pg1, err := serverCPUTime(s.pgPID); err == nil && pgErr == nil && s.pgPID != 0 {
		pgShare = 100 * (pg1 - pg0).Seconds() / wall
	}
	return 100 * (cpu1 - cpu0).Seconds() / wall, pgShare, nil
}

// restEndpointID is the i-th parked endpoint's id; the SQL in
// seedOpenCircuits makes the same ones; restDeliveryID likewise, the j-th
// delivery going to endpoint j mod the number of endpoints.
func restEndpointID(i int) string { return fmt.Sprintf("ep_bench_rest_%d", i) }
func restDeliveryID(j int) string { return fmt.Sprintf("dlv_%026d", j) }

// seedOpenCircuits writes, for the project "bench", n endpoints whose
// circuits opened just now after 10 failures, their probe at probeAt, and m
// events with one delivery each, spread over the endpoints, failed once and
// waiting for their circuit (waiting_reason circuit_open) until the end of
// their window (restWindow), as webhookd leaves them when a circuit opens:
// the probe has a wake-up of its own.
func seedOpenCircuits(ctx context.Context, dbURL, url string, n, m int, probeAt time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("seed circuits: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	key := make([]byte, 32)
	rand.Read(key)
	steps := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO endpoints (id, project_id, url, event_types, secret, circuit, failures, failing_since,
				circuit_opened_at, probe_at)
		  SELECT 'ep_bench_rest_' || i, p.id, $1, '{bench.rest}', $2, 'open', 10, now(), now(), $4
		  FROM projects p, generate_series(0, $3::int - 1) i WHERE p.name = 'bench'`,
			[]any{url, "whsec_" + base64.StdEncoding.EncodeToString(key), n, probeAt}},
		{`INSERT INTO events (id, project_id, type, data)
		  SELECT 'evt_' || lpad(j::text, 26, '0'), p.id, 'bench.rest', '{}'
		  FROM projects p, generate_series(0, $1::int - 1) j WHERE p.name = 'bench'`, []any{m}},
		{`INSERT INTO deliveries (id, project_id, event_id, endpoint_id, event_type, status, attempts_count,
				auto_attempts, last_status_code, next_attempt_at, waiting_reason)
		  SELECT 'dlv_' || lpad(j::text, 26, '0'), p.id, 'evt_' || lpad(j::text, 26, '0'), 'ep_bench_rest_' || (j % $2),
		         'bench.rest', 'retrying', 1, 1, 503, $3, 'circuit_open'
		  FROM projects p, generate_series(0, $1::int - 1) j WHERE p.name = 'bench'`, []any{m, n, time.Now().Add(restWindow)}},
		{`ANALYZE endpoints, events, deliveries`, nil},
	}
	for _, st := range steps {
		if _, err := conn.Exec(ctx, st.sql, st.args...); err != nil {
			return fmt.Errorf("seed circuits: %w", err)
		}
	}
	return nil
}

// restWindow is the default schedule's window (1m+15m+1h+24h): how long a
// delivery held by an open circuit waits at most.
const restWindow = 25*time.Hour + 16*time.Minute

// enqueueParked gives each seeded delivery its wake-up at the end of its
// window and each circuit its probe's at probeAt, with webhookd's own queue
// code, in chunks of 1,000 from 8 goroutines.
func enqueueParked(ctx context.Context, q *dispatcher.Queue, n, m int, probeAt time.Time) error {
	for i := range n {
		if _, err := q.EnqueueProbe(ctx, restEndpointID(i), probeAt, false); err != nil {
			return err
		}
	}
	end := time.Now().Add(restWindow)
	const chunk, workers = 1000, 8
	starts := make(chan int, m/chunk+1)
	for j := 0; j < m; j += chunk {
		starts <- j
	}
	close(starts)
	g, ctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			for start := range starts {
				ds := make([]webhookd.ScheduledDelivery, 0, chunk)
				for j := start; j < min(start+chunk, m); j++ {
					ds = append(ds, webhookd.ScheduledDelivery{ID: restDeliveryID(j),
						EndpointID: restEndpointID(j % n), DueAt: end})
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

// countParked counts the deliveries still waiting for their circuit.
func countParked(ctx context.Context, dbURL string) (int, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE endpoint_id LIKE 'ep_bench_rest_%'
		AND status = 'retrying' AND waiting_reason = 'circuit_open'`).Scan(&n)
	return n, err
}
