package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// stack is a real API server (its own PostgreSQL schema and Redis
// database) behind a fault-injecting proxy, and an API key of a project.
type stack struct {
	db    *storage.DB
	api   *httptest.Server
	proxy *faultProxy
	key   string
}

func newStack(t testing.TB, plan storage.ProjectPlan) *stack {
	t.Helper()
	db := testenv.DB(t)
	rdb, _ := testenv.Redis(t)
	srv, err := api.New(api.Config{DB: db, Redis: rdb, AllowPrivateNetworks: true,
		Logger: slog.New(slog.DiscardHandler), Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{db: db, api: httptest.NewServer(srv)}
	t.Cleanup(s.api.Close)
	s.proxy = newFaultProxy(t, s.api.URL)
	key, _, err := db.Store().CreateAPIKey(context.Background(), "main", plan)
	if err != nil {
		t.Fatal(err)
	}
	s.key = key
	return s
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

// fault is what the proxy does with one request instead of passing it on.
type fault struct {
	// drop passes the request on, then cuts the connection without
	// answering: the API acted, the client never hears of it.
	drop bool
	// status, when set, answers the request with this status and an error
	// body in the API's shape, without passing it on.
	status     int
	retryAfter string // Retry-After of that answer
}

// seen is one request that reached the proxy and what came of it.
type seen struct {
	method, path   string
	idempotencyKey string
	at             time.Time
	status         int // 0 when dropped
	replayed       bool
}

// faultProxy forwards requests to the API, except where rule says to
// inject a fault; it records every request.
type faultProxy struct {
	target string
	srv    *httptest.Server
	mu     sync.Mutex
	seen   []seen
	rule   func(n int, r *http.Request) fault // n counts requests from 1
}

func newFaultProxy(t testing.TB, target string) *faultProxy {
	p := &faultProxy{target: target}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *faultProxy) setRule(rule func(n int, r *http.Request) fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rule = rule
}

func (p *faultProxy) requests() []seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seen(nil), p.seen...)
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen = append(p.seen, seen{method: r.Method, path: r.URL.Path, idempotencyKey: r.Header.Get("Idempotency-Key"), at: time.Now()})
	i := len(p.seen) - 1
	var f fault
	if p.rule != nil {
		f = p.rule(i+1, r)
	}
	p.mu.Unlock()
	record := func(status int, replayed bool) {
		p.mu.Lock()
		p.seen[i].status, p.seen[i].replayed = status, replayed
		p.mu.Unlock()
	}
	if f.status != 0 {
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `{"error":{"code":"injected","message":"injected by the test proxy","request_id":"req_proxy%d"}}`, i+1)
		record(f.status, false)
		return
	}
	body, _ := io.ReadAll(r.Body)
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		record(http.StatusBadGateway, false)
		return
	}
	defer resp.Body.Close()
	respBody, _ := io.ReadAll(resp.Body)
	if f.drop {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(respBody)
	record(resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true")
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

// The examples' API, set by TestMain.
var (
	apiURL string
	apiKey string
)

func TestMain(m *testing.M) {
	tb := &mainTB{}
	s := newStack(tb, storage.ProjectPlan{})
	apiURL, apiKey = s.api.URL, s.key
	seedDeadLetter(tb, s)
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
