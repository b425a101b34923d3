package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// ingestScenario: single-event POSTs (each with its own Idempotency-Key,
// rate limiting on) from a fixed pool of clients as fast as the API answers
// them, to one instant endpoint that must keep pace.
var ingestScenario = scenario{
	Name: "ingest",
	Title: func(o *Options) string {
		return fmt.Sprintf("one instant endpoint on type bench.ingest; %s events, one per POST with an Idempotency-Key, "+
			"from %d clients as fast as the API answers; POSTs/s over the posting, request latency, deliveries/s "+
			"from the first POST to the last receipt, and latency from each 202 to its receipt", thousands(float64(o.IngestEvents)), o.IngestClients)
	},
	Run: runIngest,
}

// ingestBatchScenario: the same through POST /v1/events/batch.
var ingestBatchScenario = scenario{
	Name: "ingest-batch",
	Title: func(o *Options) string {
		return fmt.Sprintf("one instant endpoint on type bench.ingest; %s events in batches of %d from %d clients as fast "+
			"as the API answers; events accepted/s over the posting (the deliveries drain afterwards and are checked)",
			thousands(float64(o.IngestBatchEvents)), o.IngestBatchSize, o.IngestBatchClients)
	},
	Run: runIngestBatch,
}

func runIngest(ctx context.Context, o *Options, seq int) (result, error) {
	s, p, note, err := startIngest(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	rate, took, err := postSingles(ctx, p, o.IngestEvents, o.IngestClients)
	if err != nil {
		return result{}, err
	}
	if err := waitDelivered(ctx, s.recv, p.targets, p.ledger.Expected(), o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	if err := writeTrace(o, "ingest", seq, p.ledger, s.recv); err != nil {
		return result{}, err
	}
	st := p.ledger.Stats(s.recv)
	common, err := s.common(st, info)
	if err != nil {
		return result{}, err
	}
	figs := []figure{
		{Name: "POSTs/s", Unit: perSecond, Value: rate, Target: atLeast(3000, perSecond), Throughput: true},
		{Name: "request p50", Unit: milliseconds, Value: percentile(took, 0.50), Target: info},
		{Name: "request p99", Unit: milliseconds, Value: percentile(took, 0.99), Target: below(25, milliseconds)},
		{Name: "deliveries/s", Unit: perSecond, Value: st.Rate(), Target: info, Throughput: true},
		// Issue 38's instant receivers: WebhookX's p99 on the same load.
		{Name: "latency p50 (accepted → received)", Unit: milliseconds, Value: percentile(st.Latencies, 0.50), Target: info},
		{Name: "latency p99 (accepted → received)", Unit: milliseconds, Value: percentile(st.Latencies, 0.99),
			Target: below(35, milliseconds)},
	}
	return result{Figures: append(figs, common...), Notes: []string{note}}, nil
}

// ingestRedisDownScenario: single-event POSTs while Redis is gone, then
// Redis back, empty: the events are accepted all the same, and the
// reconciler hands their deliveries to the new Redis.
var ingestRedisDownScenario = scenario{
	Name: "ingest-redis-down",
	Title: func(o *Options) string {
		return fmt.Sprintf("one instant endpoint on type bench.ingest; Redis stopped, then %s events, one per POST with an "+
			"Idempotency-Key, from %d clients; then Redis started again, empty; POSTs/s and request latency while "+
			"Redis is down, and how long after its return the last delivery arrives (the reconciler, every %s, "+
			"hands over deliveries overdue by %s, its grace for their own tasks)", thousands(float64(o.RedisDownEvents)),
			o.IngestClients, reconcileInterval, reconcileGrace)
	},
	Run: runIngestRedisDown,
}

// webhookd's defaults: WEBHOOKD_RECONCILE_INTERVAL and
// dispatcher.DefaultReconcileGrace.
const (
	reconcileInterval = 5 * time.Second
	reconcileGrace    = 10 * time.Second
)

func runIngestRedisDown(ctx context.Context, o *Options, seq int) (result, error) {
	s, p, note, err := startIngest(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	s.redis.Stop()
	rate, took, err := postSingles(ctx, p, o.RedisDownEvents, o.IngestClients)
	if err != nil {
		return result{}, err
	}
	if err := s.redis.Restart(ctx); err != nil {
		return result{}, err
	}
	back := time.Now()
	if err := waitDelivered(ctx, s.recv, p.targets, p.ledger.Expected(), o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	handover := time.Since(back)
	st := p.ledger.Stats(s.recv)
	common, err := s.common(st, info)
	if err != nil {
		return result{}, err
	}
	figs := append(postingFigures("POSTs/s, Redis down", rate, took),
		figure{Name: "last delivery after Redis returned", Unit: seconds, Value: handover.Seconds(), Target: info})
	return result{Figures: append(figs, common...), Notes: []string{note}}, nil
}

// postingFigures are a posting's rate, named rateName, and its requests'
// p50 and p99, none with a target.
func postingFigures(rateName string, rate float64, took []float64) []figure {
	return []figure{
		{Name: rateName, Unit: perSecond, Value: rate, Target: info, Throughput: true},
		{Name: "request p50", Unit: milliseconds, Value: percentile(took, 0.50), Target: info},
		{Name: "request p99", Unit: milliseconds, Value: percentile(took, 0.99), Target: info},
	}
}

// writeTrace writes a run's receipts (ledger.WriteTrace) into -trace's
// directory, if one was given, as <scenario>-<run>-<first POST's unix ms>.csv:
// named by its first POST, to place its tails beside the server's logs.
func writeTrace(o *Options, scenario string, seq int, l *ledger, r *receiver) error {
	if o.TraceDir == "" {
		return nil
	}
	return l.WriteTrace(r, filepath.Join(o.TraceDir, fmt.Sprintf("%s-%d-%d.csv", scenario, seq, l.first.UnixMilli())))
}

// postSingles posts events 0..n-1, one per POST, from clients at once as
// fast as the API answers, and returns POSTs/s over the posting and each
// request's latency (ms, sorted).
func postSingles(ctx context.Context, p poster, n, clients int) (float64, []float64, error) {
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var (
		accepted atomic.Int64
		mu       sync.Mutex
		took     []float64
	)
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range clients {
		g.Go(func() error {
			var mine []float64
			defer func() { mu.Lock(); took = append(took, mine...); mu.Unlock() }()
			for i := range next {
				p.ledger.Start()
				t0 := time.Now()
				id, at, err := p.api.PostEvent(gctx, p.make(i))
				if errors.Is(err, errRefused) {
					continue
				}
				if err != nil {
					return err
				}
				mine = append(mine, float64(at.Sub(t0).Microseconds())/1000)
				p.ledger.AcceptOne(id, t0, at, p.targets)
				accepted.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, nil, err
	}
	posting := time.Since(start)
	slices.Sort(took)
	return float64(accepted.Load()) / posting.Seconds(), took, nil
}

func runIngestBatch(ctx context.Context, o *Options, seq int) (result, error) {
	s, p, note, err := startIngest(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	start := time.Now()
	if err := p.Batches(ctx, o.IngestBatchEvents, o.IngestBatchSize, o.IngestBatchClients); err != nil {
		return result{}, err
	}
	posting := time.Since(start)
	accepted := p.ledger.Expected()
	if err := waitDelivered(ctx, s.recv, p.targets, accepted, o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	st := p.ledger.Stats(s.recv)
	common, err := s.common(st, info)
	if err != nil {
		return result{}, err
	}
	figs := []figure{
		{Name: "events accepted/s", Unit: perSecond, Value: float64(accepted) / posting.Seconds(), Target: atLeast(30000, perSecond), Throughput: true},
		{Name: "deliveries/s", Unit: perSecond, Value: st.Rate(), Target: info, Throughput: true},
	}
	return result{Figures: append(figs, common...), Notes: []string{note}}, nil
}

// startIngest starts the stack with one instant endpoint on bench.ingest.
func startIngest(ctx context.Context, o *Options, seq int) (*stack, poster, string, error) {
	s, err := startStack(ctx, o, seq)
	if err != nil {
		return nil, poster{}, "", err
	}
	p, note, err := ingestPoster(ctx, s)
	if err != nil {
		s.Close()
		return nil, poster{}, "", err
	}
	return s, p, note, nil
}

// ingestPoster creates the one instant endpoint on bench.ingest on a
// started stack and returns the poster of its events.
func ingestPoster(ctx context.Context, s *stack) (poster, string, error) {
	note, err := s.createEndpoints(ctx, []endpoint{
		{name: "ingest", behaviour: instant, eventType: "bench.ingest", maxInFlight: s.opts.MaxInFlight}})
	if err != nil {
		return poster{}, "", err
	}
	return poster{api: s.api, ledger: &ledger{}, targets: []string{"ingest"},
		make: func(i int) eventIn { return eventIn{Type: "bench.ingest", Data: map[string]int{"n": i}} }}, note, nil
}

// ingestAPIScenario: ingest's POSTs with `webhookd serve` alone, a worker
// started only once the posting has ended. ingest's end-to-end rate is
// what the machine gives the API and the deliveries together; this says
// what each half does without the other beside it: the API's POSTs/s with
// no delivery running, and the delivery path's rate on the backlog left.
var ingestAPIScenario = scenario{
	Name: "ingest-api",
	Title: func(o *Options) string {
		return fmt.Sprintf("ingest's endpoint and %s events, one per POST with an Idempotency-Key, from %d clients "+
			"as fast as the API answers, to `webhookd serve` with no worker running; then one `webhookd worker` "+
			"started: POSTs/s with no delivery beside them, and deliveries/s of the backlog from the worker's "+
			"start to the last receipt", thousands(float64(o.IngestEvents)), o.IngestClients)
	},
	Run: runIngestAPI,
}

func runIngestAPI(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := startSplitStack(ctx, o, seq, 0)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	p, note, err := ingestPoster(ctx, s)
	if err != nil {
		return result{}, err
	}
	rate, took, err := postSingles(ctx, p, o.IngestEvents, o.IngestClients)
	if err != nil {
		return result{}, err
	}
	apiCPU, err := s.proc.CPUTime()
	if err != nil {
		return result{}, err
	}
	pgCPU := nan // PostgreSQL's share of the posting, when it runs here
	if c, ok := s.postgresCPU(); ok {
		pgCPU = c.Seconds()
	}
	began := time.Now()
	w, err := s.startWorker()
	if err != nil {
		return result{}, err
	}
	if err := w.WaitReady(ctx, s.client); err != nil {
		return result{}, err
	}
	if err := waitDelivered(ctx, s.recv, p.targets, p.ledger.Expected(), o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	st := p.ledger.Stats(s.recv)
	common, err := s.common(st, info)
	if err != nil {
		return result{}, err
	}
	figs := append(postingFigures("POSTs/s, no worker running", rate, took),
		figure{Name: "webhookd serve CPU time to the end of the posting", Unit: seconds, Value: apiCPU.Seconds(), Target: info},
		figure{Name: "PostgreSQL CPU time to the end of the posting", Unit: seconds, Value: pgCPU, Target: info},
		figure{Name: "deliveries/s of the backlog (from the worker's start)", Unit: perSecond,
			Value: float64(st.Received) / st.LastReceipt.Sub(began).Seconds(), Target: info, Throughput: true})
	return result{Figures: append(figs, common...), Notes: []string{note}}, nil
}
