package dispatcher_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/wire"
)

// received is one request a receiver got.
type received struct {
	at     time.Time
	header http.Header
	body   []byte
}

// receiver is an httptest server on loopback that answers with a script
// and records what it gets.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(n int, w http.ResponseWriter, r *http.Request) // n: 1-based request count
}

func newReceiver(t testing.TB, answer func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	rc := &receiver{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{at: time.Now(), header: r.Header.Clone(), body: body})
		n := len(rc.got)
		rc.mu.Unlock()
		rc.answer(n, w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func status(code int) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
}

// switchable is a receiver that answers every request with a status the
// test changes with set; each answer waits delay first.
func switchable(t testing.TB, code int, delay time.Duration) (rc *receiver, set func(int)) {
	var mu sync.Mutex
	rc = newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		c := code
		mu.Unlock()
		time.Sleep(delay)
		w.WriteHeader(c)
	})
	return rc, func(c int) { mu.Lock(); code = c; mu.Unlock() }
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// env is a worker on its own schema and Redis database.
type env struct {
	t       testing.TB
	db      *storage.DB
	redis   *redis.Client
	project webhookd.Project
	cfg     dispatcher.Config
	worker  *dispatcher.Worker
}

func newEnv(t testing.TB, tweak func(*dispatcher.Config)) *env {
	t.Helper()
	db := testenv.DB(t)
	rdb, _ := testenv.Redis(t)
	_, p, err := db.Store().CreateAPIKey(context.Background(), "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := dispatcher.Config{DB: db, Redis: rdb, Schedule: dispatcher.Schedule{time.Second, time.Second, time.Second, time.Second},
		HTTP:        wire.HTTPConfig{AllowPrivateNetworks: true, ConnectTimeout: 2 * time.Second, ResponseTimeout: 2 * time.Second},
		Concurrency: 10, ReconcileInterval: time.Hour, ReconcileGrace: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		// The breaker off: the tests of other behaviour fail endpoints on
		// purpose; lifecycle_test.go turns it on.
		Circuit: storage.CircuitConfig{After: -1, DisableAfter: -1}}
	if tweak != nil {
		tweak(&cfg)
	}
	e := &env{t: t, db: db, redis: rdb, project: p, cfg: cfg}
	e.worker = e.startWorker()
	return e
}

// startWorker starts a(nother) worker process on the env's queue.
func (e *env) startWorker() *dispatcher.Worker {
	e.t.Helper()
	w, err := dispatcher.NewWorker(e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cancel(); w.Stop() })
	return w
}

// newProject makes a project (and an API key) in db.
func newProject(t testing.TB, db *storage.DB) webhookd.Project {
	t.Helper()
	_, p, err := db.Store().CreateAPIKey(context.Background(), "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newSecret(t testing.TB) string {
	raw := make([]byte, 24)
	rand.Read(raw)
	return "whsec_" + base64.StdEncoding.EncodeToString(raw)
}

func (e *env) endpoint(url string, rate *int) webhookd.Endpoint {
	e.t.Helper()
	ep, err := e.db.Store().CreateEndpoint(context.Background(), e.project.ID,
		storage.NewEndpoint{URL: url, Secret: newSecret(e.t), RateLimitPerSecond: rate}, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return ep
}

// publish ingests events of type typ and enqueues their deliveries, as the
// API does; it returns the delivery ids.
func (e *env) publish(typ string, n int) []string {
	e.t.Helper()
	evs := make([]storage.NewEvent, n)
	for i := range evs {
		evs[i] = storage.NewEvent{Type: typ, Data: json.RawMessage(`{"n":1}`)}
	}
	now := time.Now()
	out, err := e.db.Store().CreateEvents(context.Background(), e.project.ID, evs, now, func(int) string { return "" })
	if err != nil {
		e.t.Fatal(err)
	}
	var ids []string
	var due []webhookd.ScheduledDelivery
	for _, ev := range out {
		for _, d := range ev.Deliveries {
			ids = append(ids, d.ID)
			due = append(due, webhookd.ScheduledDelivery{ID: d.ID, EndpointID: d.EndpointID, DueAt: now})
		}
	}
	if err := e.worker.Queue.Enqueue(context.Background(), due...); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func (e *env) delivery(id string) webhookd.Delivery {
	e.t.Helper()
	d, err := e.db.Store().GetDelivery(context.Background(), e.project.ID, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// waitStatus polls until the delivery reaches status.
func (e *env) waitStatus(id, status string, within time.Duration) webhookd.Delivery {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		// A read may meet a connection a fault drill just dropped: try again.
		d, err := e.db.Store().GetDelivery(context.Background(), e.project.ID, id)
		if err == nil && d.Status == status {
			return d
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("delivery %s is %s after %v, want %s (attempts %d, last error %v, read error %v)", id, d.Status,
				within, status, d.AttemptsCount, deref(d.LastError), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// waitFor polls cond until it holds or the time is up.
var waitFor = testenv.WaitFor

// redeliver asks for a manual attempt as the API does: recorded, then queued.
func (e *env) redeliver(id, by string) {
	e.t.Helper()
	ctx := context.Background()
	req := storage.NewRequestID()
	if _, err := e.db.Store().RequestRedelivery(ctx, e.project.ID, id, req, by); err != nil {
		e.t.Fatal(err)
	}
	if err := e.worker.Queue.EnqueueManual(ctx, req, id, by); err != nil {
		e.t.Fatal(err)
	}
}
