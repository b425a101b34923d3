// Package faultproxy is the small fault-injecting HTTP proxy that client
// tests (the Go client's, and every SDK's through the conformance server)
// put between a client and a real API: it passes requests on, except where
// a rule says to drop the answer or to answer with an error itself, and it
// records every request it saw.
package faultproxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
)

// Fault is what the proxy does with one request instead of passing it on.
type Fault struct {
	// Drop passes the request on, then cuts the connection without
	// answering: the API acted, the client never hears of it.
	Drop bool `json:"drop,omitempty"`
	// Status, when set, answers the request with this status and an error
	// body in the API's shape (request id req_proxy<n>), without passing it
	// on.
	Status     int    `json:"status,omitempty"`
	RetryAfter string `json:"retry_after,omitempty"` // Retry-After of that answer
}

// Seen is one request that reached the proxy and what came of it.
type Seen struct {
	Method         string    `json:"method"`
	Path           string    `json:"path"`
	IdempotencyKey string    `json:"idempotency_key"`
	At             time.Time `json:"at"`
	Status         int       `json:"status"` // 0 when dropped
	Replayed       bool      `json:"replayed"`
}

// Rule picks the fault for the n-th request (n counts from 1); the zero
// Fault passes it on.
type Rule func(n int, r *http.Request) Fault

// Proxy forwards requests to a target API on loopback.
type Proxy struct {
	URL    string // the proxy's own base URL
	target string
	srv    *httptest.Server
	mu     sync.Mutex
	seen   []Seen
	rule   Rule
}

// New starts a proxy to target (a base URL). Close stops it.
func New(target string) *Proxy {
	p := &Proxy{target: target}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	return p
}

// Close stops the proxy.
func (p *Proxy) Close() { p.srv.Close() }

// SetRule replaces the rule (nil: pass everything on).
func (p *Proxy) SetRule(rule Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rule = rule
}

// Requests returns what the proxy has seen so far, in arrival order.
func (p *Proxy) Requests() []Seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Seen(nil), p.seen...)
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen = append(p.seen, Seen{Method: r.Method, Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"), At: time.Now()})
	i := len(p.seen) - 1
	var f Fault
	if p.rule != nil {
		f = p.rule(i+1, r)
	}
	p.mu.Unlock()
	record := func(status int, replayed bool) {
		p.mu.Lock()
		p.seen[i].Status, p.seen[i].Replayed = status, replayed
		p.mu.Unlock()
	}
	if f.Status != 0 {
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", fmt.Sprintf("req_proxy%d", i+1))
		w.WriteHeader(f.Status)
		fmt.Fprintf(w, `{"error":{"code":"injected","message":"injected by the test proxy","request_id":"req_proxy%d"}}`, i+1)
		record(f.Status, false)
		return
	}
	body, _ := io.ReadAll(r.Body)
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		record(http.StatusBadGateway, false)
		return
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
	if f.Drop {
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
