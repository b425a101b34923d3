package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// behaviour is how a receiver endpoint answers.
type behaviour int

const (
	instant   behaviour = iota // 204 at once
	slow                       // 204 after slowDelay
	hang                       // never answers; returns when the request's context ends
	capacity                   // serves capacityLimit at once, each for capacityDelay, and answers 503 to the rest
	congested                  // serves everything, each for capacityDelay × max(1, in flight / capacityLimit)
)

// slowDelay is how long a slow endpoint takes to answer.
const slowDelay = 200 * time.Millisecond

// capacityLimit and capacityDelay make a capacity or congested endpoint's
// real capacity: capacityLimit / capacityDelay requests a second.
const (
	capacityLimit = 50
	capacityDelay = 100 * time.Millisecond
)

// capacityRate is that capacity, requests a second.
const capacityRate = float64(capacityLimit) / float64(capacityDelay) * float64(time.Second)

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

// receiverEndpoint is what one /r/{name} does and has seen. A request
// refused for overload (a capacity endpoint's 503) is counted in requests
// and refused only: it is no receipt, and not in flight.
type receiverEndpoint struct {
	behaviour   behaviour
	delay       time.Duration          // a slow endpoint's answer time
	first       map[string]time.Time   // event id -> first receipt
	again       map[string][]time.Time // event id -> later receipts, when recorded (RecordRepeats)
	repeats     int                    // receipts of an event id already seen
	inFlight    int                    // requests being answered now
	maxInFlight int                    // the most at once
	peak        int                    // the most at once since the last TakePeak
	requests    int                    // every request, refused ones included
	refused     int                    // answered 503 for overload
	cut         []cutRequest           // requests whose client went away before the answer
}

// cutRequest is a request whose client went away before it was answered.
type cutRequest struct {
	eventID string
	at      time.Time
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
	r.endpoints[name] = &receiverEndpoint{behaviour: b, delay: slowDelay, first: make(map[string]time.Time)}
	return r.URL + "/r/" + name
}

// SetDelay makes slow endpoint name answer after d.
func (r *receiver) SetDelay(name string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endpoints[name].delay = d
}

// RecordRepeats makes endpoint name keep the time of every receipt after
// an event id's first, for ReceivedAfter.
func (r *receiver) RecordRepeats(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endpoints[name].again = make(map[string][]time.Time)
}

func (r *receiver) countConn(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		r.conns.Add(1)
	}
}

// serve records the receipt, then answers as the endpoint's behaviour says.
func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	name, eventID := req.PathValue("name"), req.Header.Get("webhook-id")
	a, ok := r.record(name, eventID, now)
	if !ok {
		http.NotFound(w, req)
		return
	}
	io.Copy(io.Discard, req.Body)
	if a.refuse {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	defer r.done(name)
	if a.hang {
		<-req.Context().Done()
		r.noteCut(name, eventID)
		return
	}
	if a.delay > 0 {
		t := time.NewTimer(a.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-req.Context().Done():
			r.noteCut(name, eventID)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// answer is how serve answers one request.
type answer struct {
	refuse bool          // 503 at once
	hang   bool          // never
	delay  time.Duration // 204 after this long
}

// noteCut records that the client of a request for eventID went away
// before the answer.
func (r *receiver) noteCut(name, eventID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.endpoints[name]
	e.cut = append(e.cut, cutRequest{eventID: eventID, at: time.Now()})
}

// record notes a request for eventID at endpoint name, a receipt unless
// it is refused, and says how to answer it.
func (r *receiver) record(name, eventID string, at time.Time) (answer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.endpoints[name]
	if !ok {
		return answer{}, false
	}
	e.requests++
	if e.behaviour == capacity && e.inFlight >= capacityLimit {
		e.refused++
		return answer{refuse: true}, true
	}
	if _, seen := e.first[eventID]; seen {
		e.repeats++
		if e.again != nil {
			e.again[eventID] = append(e.again[eventID], at)
		}
	} else {
		e.first[eventID] = at
	}
	e.inFlight++
	e.maxInFlight = max(e.maxInFlight, e.inFlight)
	e.peak = max(e.peak, e.inFlight)
	switch e.behaviour {
	case slow:
		return answer{delay: e.delay}, true
	case hang:
		return answer{hang: true}, true
	case capacity:
		return answer{delay: capacityDelay}, true
	case congested:
		return answer{delay: capacityDelay * time.Duration(max(capacityLimit, e.inFlight)) / capacityLimit}, true
	}
	return answer{}, true
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

// Receipts counts every receipt at endpoint name, repeats included
// (refused requests are none).
func (r *receiver) Receipts(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.endpoints[name]
	return len(e.first) + e.repeats
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

// TakePeak is the most requests endpoint name held at once since the
// last TakePeak (or the start), and starts a new window.
func (r *receiver) TakePeak(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.endpoints[name]
	p := e.peak
	e.peak = e.inFlight
	return p
}

// InFlight is how many requests endpoint name holds now.
func (r *receiver) InFlight(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.endpoints[name].inFlight
}

// Requests is how many requests endpoint name got in all, and how many of
// them it refused for overload.
func (r *receiver) Requests(name string) (all, refused int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.endpoints[name]
	return e.requests, e.refused
}

// CutSince lists the requests to endpoint name whose client went away at
// or after t, the first cut of each event id only.
func (r *receiver) CutSince(name string, t time.Time) []cutRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[string]bool)
	var out []cutRequest
	for _, c := range r.endpoints[name].cut {
		if !c.at.Before(t) && !seen[c.eventID] {
			seen[c.eventID] = true
			out = append(out, c)
		}
	}
	return out
}

// ReceivedAfter is the first receipt of eventID at endpoint name after t,
// first or repeated (repeats only when RecordRepeats was called). For a
// request cut at t, that is the next request for the event: the cut one
// arrived before t.
func (r *receiver) ReceivedAfter(name, eventID string, t time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.endpoints[name]
	if f, ok := e.first[eventID]; ok && f.After(t) {
		return f, true
	}
	for _, at := range e.again[eventID] {
		if at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// Redelivered lists, for each event first received at endpoint name
// before t and received again after it, the seconds from t to its first
// receipt after t, sorted.
func (r *receiver) Redelivered(name string, t time.Time) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.endpoints[name]
	var out []float64
	for id, first := range e.first {
		if !first.Before(t) {
			continue
		}
		for _, at := range e.again[id] {
			if at.After(t) {
				out = append(out, at.Sub(t).Seconds())
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// Close stops the server and ends every request still held, so hanging
// attempts fail at once rather than at webhookd's response timeout.
func (r *receiver) Close() { r.srv.Close() }
