package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// behaviour is how a receiver endpoint answers.
type behaviour int

const (
	instant behaviour = iota // 204 at once
	slow                     // 204 after slowDelay
	hang                     // never answers; returns when the request's context ends
)

// slowDelay is how long a slow endpoint takes to answer.
const slowDelay = 200 * time.Millisecond

// receiver is one HTTP server on 127.0.0.1 serving every endpoint of a
// scenario at /r/{name}. It records when each event id first reached each
// endpoint and how often it came again.
type receiver struct {
	URL   string // http://127.0.0.1:<port>
	srv   *http.Server
	conns atomic.Int64 // TCP connections accepted

	mu        sync.Mutex
	endpoints map[string]*receiverEndpoint
}

// receiverEndpoint is what one /r/{name} does and has seen.
type receiverEndpoint struct {
	behaviour   behaviour
	first       map[string]time.Time // event id -> first receipt
	repeats     int                  // receipts of an event id already seen
	inFlight    int                  // requests being answered now
	maxInFlight int                  // the most at once
}

// startReceiver listens on a free loopback port. The server keeps
// keep-alive connections for long and takes large headers, so webhookd's
// connections are reused rather than churned.
func startReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	r := &receiver{URL: "http://" + ln.Addr().String(), endpoints: make(map[string]*receiverEndpoint)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /r/{name}", r.serve)
	r.srv = &http.Server{Handler: mux, MaxHeaderBytes: 1 << 20, IdleTimeout: 10 * time.Minute,
		ReadHeaderTimeout: time.Minute, ConnState: r.countConn}
	go r.srv.Serve(ln)
	return r, nil
}

// Add makes /r/{name} answer with b and returns its URL.
func (r *receiver) Add(name string, b behaviour) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endpoints[name] = &receiverEndpoint{behaviour: b, first: make(map[string]time.Time)}
	return r.URL + "/r/" + name
}

func (r *receiver) countConn(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		r.conns.Add(1)
	}
}

// serve records the receipt, then answers as the endpoint's behaviour says.
func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	b, ok := r.record(req.PathValue("name"), req.Header.Get("webhook-id"), now)
	if !ok {
		http.NotFound(w, req)
		return
	}
	defer r.done(req.PathValue("name"))
	io.Copy(io.Discard, req.Body)
	switch b {
	case slow:
		select {
		case <-time.After(slowDelay):
		case <-req.Context().Done():
			return
		}
	case hang:
		<-req.Context().Done()
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// record notes a receipt of eventID at endpoint name.
func (r *receiver) record(name, eventID string, at time.Time) (behaviour, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.endpoints[name]
	if !ok {
		return 0, false
	}
	if _, seen := e.first[eventID]; seen {
		e.repeats++
	} else {
		e.first[eventID] = at
	}
	e.inFlight++
	e.maxInFlight = max(e.maxInFlight, e.inFlight)
	return e.behaviour, true
}

func (r *receiver) done(name string) {
	r.mu.Lock()
	r.endpoints[name].inFlight--
	r.mu.Unlock()
}

// Received returns when eventID first reached endpoint name.
func (r *receiver) Received(name, eventID string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.endpoints[name].first[eventID]
	return t, ok
}

// Distinct counts the distinct event ids the named endpoints have seen.
func (r *receiver) Distinct(names []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, name := range names {
		n += len(r.endpoints[name].first)
	}
	return n
}

// Repeats counts receipts of an event id an endpoint had already seen.
func (r *receiver) Repeats() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.endpoints {
		n += e.repeats
	}
	return n
}

// MaxInFlight is the most requests endpoint name held at once.
func (r *receiver) MaxInFlight(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.endpoints[name].maxInFlight
}

// Close stops the server and ends every request still held, so hanging
// attempts fail at once rather than at webhookd's response timeout.
func (r *receiver) Close() { r.srv.Close() }
