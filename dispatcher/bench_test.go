package dispatcher_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/wire"
)

// These benchmarks run against the local PostgreSQL and Redis (testenv), on
// loopback only. Compare BenchmarkAsynqNoop's tasks/s with
// BenchmarkDeliveryEndToEnd/backlog's deliveries/s from the same run: both
// time enqueueing b.N tasks one by one and then processing them (asynq with
// 20 workers, webhookd with its default concurrency and per-endpoint cap),
// so their ratio is what webhookd's attempt (lease claim, signing, HTTP,
// record) costs over asynq's own bookkeeping. The load tool
// (cmd/webhookd-bench, make bench) measures the whole binary.

const (
	benchConcurrency = 20
	benchCreateBatch = 500                    // events per CreateEvents call in setup
	benchSteadyRate  = 200                    // events per second in the steady variant
	benchPollEvery   = 100 * time.Millisecond // asynq TaskCheckInterval of the no-op server
)

// BenchmarkAsynqNoop measures asynq alone: b.N tasks enqueued one by one,
// then a server with a handler that only counts, timed until every task has
// run. The tasks carry a TaskID and a JSON payload like webhookd's.
func BenchmarkAsynqNoop(b *testing.B) {
	rdb, _ := testenv.Redis(b)
	ctx := context.Background()
	const queue = "bench-noop"
	client := asynq.NewClientFromRedisClient(rdb)
	b.Cleanup(func() { client.Close() }) // a shared connection: leaves rdb open

	want := int64(b.N)
	var processed atomic.Int64
	all := make(chan struct{})
	handler := asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if processed.Add(1) == want {
			close(all)
		}
		return nil
	})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:       benchConcurrency,
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: benchPollEvery,
		Logger:            benchDiscardLogger{},
		LogLevel:          asynq.WarnLevel,
	})
	payload := []byte(`{"delivery_id":"dlv_01JBENCHMARKPAYLOADPADDING0","trigger":"auto"}`)

	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("bench:noop", payload),
			asynq.Queue(queue), asynq.TaskID(fmt.Sprintf("noop-%d", i)))
		if err != nil {
			b.Fatalf("enqueue: %v", err)
		}
	}
	enqueued := time.Since(start)
	if err := srv.Start(handler); err != nil {
		b.Fatalf("start asynq server: %v", err)
	}
	b.Cleanup(srv.Shutdown) // runs before testenv closes rdb
	select {
	case <-all:
	case <-time.After(benchDeadline(b.N)):
		b.Fatalf("processed %d of %d tasks after %s", processed.Load(), b.N, benchDeadline(b.N))
	}
	elapsed := time.Since(start)
	b.StopTimer()

	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
	b.ReportMetric(float64(b.N)/enqueued.Seconds(), "enqueued/s")
}

// BenchmarkDeliveryEndToEnd runs the real worker against one endpoint on an
// httptest receiver that answers 204. Latency is from the moment an event's
// Enqueue returns (the API's "accepted") to the receiver's first receipt of
// its webhook-id. "conns" is how many TCP connections the receiver accepted.
//
//   - backlog: b.N events created beforehand (untimed); the timer covers
//     enqueueing them all one by one, starting the worker, and the last
//     receipt. Its deliveries/s is the throughput to compare with
//     BenchmarkAsynqNoop; its latencies are mostly time spent queued. The
//     worker's reconciler makes its first pass at Start and offers every
//     delivery again (asynq answers TaskID conflict): inside the timer, as
//     on a real restart with a backlog.
//   - steady: the worker already running, one goroutine creates and enqueues
//     one event every 1/200 s (the API's path: CreateEvents, then Enqueue).
//     Its latencies are those of a worker that is not behind. The events
//     cannot be created in advance here: the reconciler's first pass, when
//     the worker starts, would enqueue them all at once.
func BenchmarkDeliveryEndToEnd(b *testing.B) {
	b.Run("backlog", benchBacklog)
	b.Run("steady", benchSteady)
}

func benchBacklog(b *testing.B) {
	env := newBenchDelivery(b)
	events := env.createEvents(b, b.N)
	accepted := make([]time.Time, len(events))

	b.ResetTimer()
	start := time.Now()
	for i, ev := range events {
		env.enqueue(b, ev)
		accepted[i] = time.Now()
	}
	env.start(b)
	env.wait(b)
	elapsed := time.Since(start)
	b.StopTimer()

	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "deliveries/s")
	env.reportLatency(b, events, accepted)
}

func benchSteady(b *testing.B) {
	env := newBenchDelivery(b)
	env.start(b)
	events := make([]webhookd.Event, 0, b.N)
	accepted := make([]time.Time, 0, b.N)
	tick := time.NewTicker(time.Second / benchSteadyRate)
	defer tick.Stop()

	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if i > 0 {
			<-tick.C // a slow round drops ticks rather than bursting
		}
		ev := env.createEvents(b, 1)[0]
		env.enqueue(b, ev)
		accepted = append(accepted, time.Now())
		events = append(events, ev)
	}
	offered := time.Since(start)
	env.wait(b)
	elapsed := time.Since(start)
	b.StopTimer()

	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "deliveries/s")
	if b.N > 1 {
		b.ReportMetric(float64(b.N-1)/offered.Seconds(), "offered/s")
	}
	env.reportLatency(b, events, accepted)
}

// benchDelivery is one worker, its own schema and Redis database, a project
// and one endpoint on a local receiver.
type benchDelivery struct {
	db        *storage.DB
	worker    *dispatcher.Worker
	recv      *benchReceiver
	projectID string
}

func newBenchDelivery(b *testing.B) *benchDelivery {
	b.Helper()
	ctx := context.Background()
	db := testenv.DB(b)
	rdb, _ := testenv.Redis(b)

	recv := newBenchReceiver(b.N)
	srv := httptest.NewUnstartedServer(recv) // 127.0.0.1
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			recv.conns.Add(1)
		}
	}
	srv.Start()
	b.Cleanup(srv.Close)

	store := db.Store()
	_, project, err := store.CreateAPIKey(ctx, "bench", storage.ProjectPlan{})
	if err != nil {
		b.Fatalf("create project: %v", err)
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	_, err = store.CreateEndpoint(ctx, project.ID, storage.NewEndpoint{
		URL:    srv.URL + "/hook",
		Secret: "whsec_" + base64.StdEncoding.EncodeToString(secret),
	}, time.Now())
	if err != nil {
		b.Fatalf("create endpoint: %v", err)
	}

	w, err := dispatcher.NewWorker(dispatcher.Config{
		DB:       db,
		Redis:    rdb,
		HTTP:     wire.HTTPConfig{AllowPrivateNetworks: true}, // the default concurrency and per-endpoint cap
		Schedule: dispatcher.Schedule{time.Second},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatalf("new worker: %v", err)
	}
	return &benchDelivery{db: db, worker: w, recv: recv, projectID: project.ID}
}

// start starts the worker; cleanup stops it before the benchReceiver, Redis and
// PostgreSQL go away.
func (e *benchDelivery) start(b *testing.B) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := e.worker.Start(ctx); err != nil {
		cancel()
		b.Fatalf("start worker: %v", err)
	}
	b.Cleanup(func() {
		e.worker.Stop()
		cancel()
	})
}

// createEvents stores n events, each with one delivery to the endpoint.
func (e *benchDelivery) createEvents(b *testing.B, n int) []webhookd.Event {
	b.Helper()
	ctx := context.Background()
	out := make([]webhookd.Event, 0, n)
	for len(out) < n {
		batch := make([]storage.NewEvent, min(benchCreateBatch, n-len(out)))
		for i := range batch {
			data, _ := json.Marshal(map[string]int{"n": len(out) + i})
			batch[i] = storage.NewEvent{Type: "bench.event", Data: data}
		}
		evs, err := e.db.Store().CreateEvents(ctx, e.projectID, batch, time.Now().UTC(), func(int) string { return "" })
		if err != nil {
			b.Fatalf("create events: %v", err)
		}
		for _, ev := range evs {
			if len(ev.Deliveries) != 1 {
				b.Fatalf("event %s has %d deliveries, want 1", ev.ID, len(ev.Deliveries))
			}
		}
		out = append(out, evs...)
	}
	return out
}

func (e *benchDelivery) enqueue(b *testing.B, ev webhookd.Event) {
	err := e.worker.Queue.Enqueue(context.Background(),
		webhookd.ScheduledDelivery{ID: ev.Deliveries[0].ID, EndpointID: ev.Deliveries[0].EndpointID, DueAt: ev.CreatedAt})
	if err != nil {
		b.Fatalf("enqueue: %v", err)
	}
}

// wait blocks until the benchReceiver has seen every event, or fails at a
// deadline that grows with b.N.
func (e *benchDelivery) wait(b *testing.B) {
	b.Helper()
	d := benchDeadline(b.N)
	select {
	case <-e.recv.all:
	case <-time.After(d):
		b.Fatalf("benchReceiver saw %d of %d deliveries after %s", e.recv.count(), b.N, d)
	}
}

// reportLatency reports p50_ms and p99_ms from accepted[i] to the first
// receipt of events[i].
func (e *benchDelivery) reportLatency(b *testing.B, events []webhookd.Event, accepted []time.Time) {
	b.Helper()
	first, dups := e.recv.snapshot()
	lat := make([]float64, len(events))
	for i, ev := range events {
		got, ok := first[ev.ID]
		if !ok {
			b.Fatalf("event %s never arrived", ev.ID)
		}
		lat[i] = float64(got.Sub(accepted[i])) / float64(time.Millisecond)
	}
	slices.Sort(lat)
	b.ReportMetric(benchPercentile(lat, 0.50), "p50_ms")
	b.ReportMetric(benchPercentile(lat, 0.99), "p99_ms")
	b.ReportMetric(float64(e.recv.conns.Load()), "conns")
	if dups > 0 {
		b.Logf("benchReceiver got %d repeated requests", dups)
	}
}

// benchPercentile is the nearest-rank benchPercentile of sorted values.
func benchPercentile(sorted []float64, p float64) float64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// benchDeadline bounds a wait for n deliveries: far above any plausible run.
func benchDeadline(n int) time.Duration {
	return 60*time.Second + time.Duration(n)*10*time.Millisecond
}

// benchReceiver answers 204 and records when it first saw each webhook-id.
type benchReceiver struct {
	mu    sync.Mutex
	first map[string]time.Time
	dups  int
	want  int
	conns atomic.Int64  // TCP connections accepted
	all   chan struct{} // closed when want distinct ids have arrived
}

func newBenchReceiver(want int) *benchReceiver {
	return &benchReceiver{first: make(map[string]time.Time, want), want: want, all: make(chan struct{})}
}

func (r *benchReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	io.Copy(io.Discard, req.Body)
	id := req.Header.Get("webhook-id")
	r.mu.Lock()
	if _, seen := r.first[id]; seen {
		r.dups++
	} else {
		r.first[id] = now
		if len(r.first) == r.want {
			close(r.all)
		}
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *benchReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.first)
}

func (r *benchReceiver) snapshot() (map[string]time.Time, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.first), r.dups
}

// benchDiscardLogger keeps asynq quiet in BenchmarkAsynqNoop.
type benchDiscardLogger struct{}

func (benchDiscardLogger) Debug(...any) {}
func (benchDiscardLogger) Info(...any)  {}
func (benchDiscardLogger) Warn(...any)  {}
func (benchDiscardLogger) Error(...any) {}
func (benchDiscardLogger) Fatal(...any) {}
