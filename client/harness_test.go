package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/internal/faultproxy"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/outbox"
	"github.com/webhookd/webhookd/storage"
)

// stack is a real API server (its own PostgreSQL schema and Redis
// database) behind a fault-injecting proxy, and an API key of a project.
type stack struct {
	db    *storage.DB
	api   *httptest.Server
	proxy *faultproxy.Proxy
	key   string
}

func newStack(t testing.TB, plan storage.ProjectPlan) *stack {
	return newStackWindow(t, plan, 0)
}

// newStackWindow is newStack with the API's rate limit counted over window
// instead of a minute (0: a minute).
func newStackWindow(t testing.TB, plan storage.ProjectPlan, window time.Duration) *stack {
	t.Helper()
	return newStackJobs(t, plan, window, nil)
}

// newStackJobs is newStackWindow whose API hands its work to enqueuer
// (nil: to nobody, as in the other tests); jobs gets the database and
// returns the enqueuer.
func newStackJobs(t testing.TB, plan storage.ProjectPlan, window time.Duration,
	jobs func(*storage.DB) webhookd.Enqueuer) *stack {
	t.Helper()
	db := testenv.DB(t)
	rdb, _ := testenv.Redis(t)
	var enqueuer webhookd.Enqueuer
	if jobs != nil {
		enqueuer = jobs(db)
	}
	// TransformTimeout: a second, not the 50 ms default that a loaded
	// machine under -race can miss (the budget is the transform package's
	// subject, not the client's).
	srv, err := api.New(api.Config{DB: db, Redis: rdb, AllowPrivateNetworks: true, RateLimitWindow: window, TransformTimeout: time.Second,
		Enqueuer: enqueuer, Logger: slog.New(slog.DiscardHandler), Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{db: db, api: httptest.NewServer(srv)}
	t.Cleanup(s.api.Close)
	s.proxy = faultproxy.New(s.api.URL)
	t.Cleanup(s.proxy.Close)
	key, _, err := db.Store().CreateAPIKey(context.Background(), "main", plan)
	if err != nil {
		t.Fatal(err)
	}
	s.key = key
	return s
}

// client is a client of the stack's API with its key.
func (s *stack) client(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.New(s.api.URL, s.key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// count returns the number of rows of a table.
func (s *stack) count(t testing.TB, table string) int {
	t.Helper()
	var n int
	if err := s.db.Pool().QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// mainTB lets TestMain set up the examples' stack with testenv, which
// wants a testing.TB.
type mainTB struct {
	testing.TB
	cleanups []func()
}

func (m *mainTB) Helper() {}
func (m *mainTB) Cleanup(f func()) {
	m.cleanups = append(m.cleanups, f)
}
func (m *mainTB) Errorf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (m *mainTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	m.close()
	os.Exit(1)
}
func (m *mainTB) Fatal(args ...any) { m.Fatalf("%s", fmt.Sprint(args...)) }
func (m *mainTB) close() {
	for i := len(m.cleanups) - 1; i >= 0; i-- {
		m.cleanups[i]()
	}
}

// The examples' API, set by TestMain, and ExampleOutbox's service
// database (a schema with webhookd_outbox).
var (
	apiURL  string
	apiKey  string
	shopURL string
)

func TestMain(m *testing.M) {
	tb := &mainTB{}
	s := newStack(tb, storage.ProjectPlan{})
	apiURL, apiKey = s.api.URL, s.key
	seedDeadLetter(tb, s)
	shopURL = outboxSchema(tb)
	code := m.Run()
	tb.close()
	os.Exit(code)
}

// seedDeadLetter gives the examples' project one dead letter of type
// invoice.failed: its endpoint answered 400.
func seedDeadLetter(t testing.TB, s *stack) {
	c, err := client.New(s.api.URL, s.key)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ep, err := c.CreateEndpoint(ctx, client.NewEndpoint{URL: "http://127.0.0.1:9/hook", EventTypes: []string{"invoice.failed"}})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := c.SendEvent(ctx, client.NewEvent{Type: "invoice.failed", Data: map[string]any{}, EndpointIDs: []string{ep.ID}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Record(t, s.db, ev.Deliveries[0].ID, webhookd.Attempt{StatusCode: new(400)},
		storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonClientError})
}

// outboxSchema makes a service's database for ExampleOutbox: a schema of
// its own with the outbox table (`webhookd outbox init`).
func outboxSchema(t testing.TB) string {
	_, u := testenv.Schema(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := outbox.Init(ctx, conn); err != nil {
		t.Fatal(err)
	}
	return u
}
