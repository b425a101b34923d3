package relay_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/relay"
	"github.com/webhookd/webhookd/wire"
)

// relayStack is a Hub serving streams for project "prj" on an HTTP server
// (as the API does, without its auth), and counting its wake-ups.
type relayStack struct {
	hub   *relay.Hub
	srv   *httptest.Server
	mu    sync.Mutex
	wakes int
}

func newRelayStack(t *testing.T) *relayStack {
	t.Helper()
	rdb, _ := testenv.Redis(t)
	s := &relayStack{}
	hub, err := relay.New(relay.Config{Redis: rdb, Heartbeat: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Wake: func(_ context.Context, project, name string) {
			s.mu.Lock()
			s.wakes++
			s.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	s.hub = hub
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/relays/"), "/stream")
		hub.Serve(w, r, "prj", name)
	}))
	t.Cleanup(func() { hub.Close(); s.srv.Close() })
	return s
}

// listen runs a Listener of relay name forwarding to forwardTo until the
// test ends or stop is called.
func (s *relayStack) listen(t *testing.T, name, forwardTo string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &relay.Listener{APIURL: s.srv.URL, APIKey: "k", Name: name, ForwardTo: forwardTo}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listener.Run: %v", err)
		}
	})
	t.Cleanup(stop)
	poll(t, "relay "+name+" listening", func() bool { ok, _ := s.hub.Listening(ctx, "prj", name); return ok })
	return stop
}

// post sends a delivery-like request to relay://name of project "prj"
// through the Hub, as the worker's client does.
func (s *relayStack) post(t *testing.T, name string, timeout time.Duration) (*http.Response, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(webhookd.WithProject(context.Background(), "prj"), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "relay://"+name, strings.NewReader(`{"id":"evt_1"}`))
	req.Header.Set("webhook-id", "evt_1")
	req.Header.Set("Content-Type", "application/json")
	c := wire.NewHTTPClient(wire.HTTPConfig{Relay: s.hub})
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// TestRelayCarriesARequestAndItsAnswer: a request to relay://NAME reaches
// the listener's local receiver with its headers and body, and the
// receiver's answer comes back as the response; the stream wakes the
// relay's deliveries when it opens and at its heartbeats, and its end
// says at once that nobody listens.
func TestRelayCarriesARequestAndItsAnswer(t *testing.T) {
	t.Parallel()
	s := newRelayStack(t)
	var got *http.Request
	var body string
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, body = r, string(b)
		w.Header().Set("X-Local", "yes")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "thanks")
	}))
	t.Cleanup(local.Close)
	stop := s.listen(t, "laptop", local.URL+"/hooks")

	resp, answer, err := s.post(t, "laptop", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusAccepted || answer != "thanks" || resp.Header.Get("X-Local") != "yes" {
		t.Fatalf("answer %d %q %v", resp.StatusCode, answer, resp.Header)
	}
	if got.URL.Path != "/hooks" || got.Method != "POST" || got.Header.Get("webhook-id") != "evt_1" || body != `{"id":"evt_1"}` {
		t.Fatalf("local request %s %s %v %q", got.Method, got.URL, got.Header, body)
	}
	poll(t, "a heartbeat's wake-up", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.wakes >= 2 })

	stop()
	poll(t, "nobody listening once the listener stopped", func() bool {
		ok, err := s.hub.Listening(context.Background(), "prj", "laptop")
		return !ok && err == nil
	})
	start := time.Now()
	if _, _, err := s.post(t, "laptop", 5*time.Second); !errors.Is(err, relay.ErrNoListener) || time.Since(start) > time.Second {
		t.Fatalf("with nobody listening: %v after %s, want ErrNoListener at once", err, time.Since(start))
	}
}

// TestRelayReportsAnUnreachableReceiver: a local receiver that cannot be
// reached is the listener's error, as the attempt records it; a relay of
// another name has no listener.
func TestRelayReportsAnUnreachableReceiver(t *testing.T) {
	t.Parallel()
	s := newRelayStack(t)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	s.listen(t, "down", closed.URL)
	_, _, err := s.post(t, "down", 5*time.Second)
	var le *relay.ListenerError
	if !errors.As(err, &le) || !strings.Contains(wire.DescribeError(err), "connection refused") {
		t.Fatalf("unreachable receiver: %v (%q)", err, wire.DescribeError(err))
	}
	if _, _, err := s.post(t, "elsewhere", 5*time.Second); !errors.Is(err, relay.ErrNoListener) {
		t.Fatalf("another relay: %v, want ErrNoListener", err)
	}
}

// TestRelayAnswerLateIsATimeout: a local receiver that answers after the
// attempt's deadline is a response timeout.
func TestRelayAnswerLateIsATimeout(t *testing.T) {
	t.Parallel()
	s := newRelayStack(t)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	t.Cleanup(func() { close(release); slow.Close() })
	s.listen(t, "slow", slow.URL)
	if _, _, err := s.post(t, "slow", 1500*time.Millisecond); wire.DescribeError(err) != "response timeout" {
		t.Fatalf("late answer: %v (%q), want a response timeout", err, wire.DescribeError(err))
	}
}
