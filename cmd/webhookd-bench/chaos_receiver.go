package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// chaosBehaviour is how one of the soak's endpoints answers.
type chaosBehaviour int

const (
	chaosInstant     chaosBehaviour = iota // 204 at once
	chaosSlow                              // 204 after slowDelay
	chaosFlapping                          // 500 for 4 s, then 204 for 4 s, and so on
	chaosRateLimited                       // 429 with Retry-After: 1 to a third of the requests, else 204
	chaosHanging                           // never answers
	chaosGone                              // 204, then 410 from goneAfter on
	chaosOrdered                           // after orderedDelay: 500 to 1 in 8, 400 to 1 in 40, else 204
)

func (b chaosBehaviour) String() string {
	return [...]string{"instant", "200ms", "flapping", "429", "hanging", "410", "ordered"}[b]
}

// orderedDelay is how long the ordered endpoint takes to answer: long
// enough that two requests in flight at once would overlap at the receiver.
const orderedDelay = 50 * time.Millisecond

// chaosArrival is one request to an endpoint whose arrivals are kept in
// order (trackArrivals): the ordered one and the breaker's.
type chaosArrival struct {
	id     string
	at     time.Time
	status int // 0: never answered
}

// chaosReceipt is what one endpoint saw of one event id.
type chaosReceipt struct {
	receipts int         // requests
	ok       int         // requests answered 2xx
	refused  int         // requests answered otherwise (or never)
	firstOK  time.Time   // the first 2xx answer
	afterOK  []time.Time // requests after the first 2xx answer: duplicates
}

// chaosReceiver serves the soak's endpoints at /c/{name} on loopback and
// records, per endpoint and event id, every request and what it answered.
type chaosReceiver struct {
	URL   string
	srv   *http.Server
	start time.Time
	// goneAfter is when the 410 endpoint starts answering 410.
	goneAfter time.Duration

	mu        sync.Mutex
	behaviour map[string]chaosBehaviour
	seen      map[string]map[string]*chaosReceipt // endpoint -> event id -> receipt
	oks       []time.Time                         // every 2xx answer, in order
	refusals  map[string][]time.Time              // endpoint -> every other answer, in order
	rng       *rand.Rand
	// arrivals are, for the endpoints in trackArrivals, every request in
	// the order it arrived; inFlight and mostInFlight the requests held at
	// once now and at most.
	arrivals     map[string][]chaosArrival
	inFlight     map[string]int
	mostInFlight map[string]int
}

// trackArrivals are the endpoints whose requests the receiver keeps in
// order of arrival: the ordered endpoint (its order and its requests in
// flight) and the flapping one (its probes).
var trackArrivals = map[string]bool{"ordered": true, "flapping": true}

func startChaosReceiver(goneAfter time.Duration, seed uint64) (*chaosReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	r := &chaosReceiver{URL: "http://" + ln.Addr().String(), start: time.Now(), goneAfter: goneAfter,
		behaviour: make(map[string]chaosBehaviour), seen: make(map[string]map[string]*chaosReceipt),
		refusals: make(map[string][]time.Time), arrivals: make(map[string][]chaosArrival),
		inFlight: make(map[string]int), mostInFlight: make(map[string]int),
		rng: rand.New(rand.NewPCG(seed, 21))}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /c/{name}", r.serve)
	r.srv = &http.Server{Handler: mux, MaxHeaderBytes: 1 << 20, IdleTimeout: 10 * time.Minute,
		ReadHeaderTimeout: time.Minute}
	go r.srv.Serve(ln)
	return r, nil
}

// Add makes /c/{name} answer as b and returns its URL.
func (r *chaosReceiver) Add(name string, b chaosBehaviour) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.behaviour[name] = b
	r.seen[name] = make(map[string]*chaosReceipt)
	return r.URL + "/c/" + name
}

func (r *chaosReceiver) serve(w http.ResponseWriter, req *http.Request) {
	name, id := req.PathValue("name"), req.Header.Get("webhook-id")
	io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	b, ok := r.behaviour[name]
	r.mu.Unlock()
	if !ok {
		http.NotFound(w, req)
		return
	}
	if trackArrivals[name] {
		r.mu.Lock()
		r.arrivals[name] = append(r.arrivals[name], chaosArrival{id: id, at: time.Now()})
		arrival := len(r.arrivals[name]) - 1
		r.inFlight[name]++
		r.mostInFlight[name] = max(r.mostInFlight[name], r.inFlight[name])
		r.mu.Unlock()
		status := 0
		defer func() {
			r.mu.Lock()
			r.inFlight[name]--
			r.arrivals[name][arrival].status = status
			r.mu.Unlock()
		}()
		w = &statusRecorder{ResponseWriter: w, status: &status}
	}
	delay := map[chaosBehaviour]time.Duration{chaosSlow: slowDelay, chaosOrdered: orderedDelay}[b]
	if delay > 0 { // wait first: an attempt cut meanwhile was never answered
		select {
		case <-time.After(delay):
		case <-req.Context().Done():
			return
		}
	}
	r.mu.Lock()
	rec := r.seen[name][id]
	if rec == nil {
		rec = &chaosReceipt{}
		r.seen[name][id] = rec
	}
	rec.receipts++
	if rec.ok > 0 {
		rec.afterOK = append(rec.afterOK, time.Now())
	}
	status := http.StatusNoContent
	since := time.Since(r.start)
	switch b {
	case chaosFlapping:
		if int(since/(4*time.Second))%2 == 0 {
			status = http.StatusInternalServerError
		}
	case chaosOrdered:
		switch n := r.rng.IntN(40); {
		case n < 5:
			status = http.StatusInternalServerError
		case n < 6:
			status = http.StatusBadRequest
		}
	case chaosRateLimited:
		if r.rng.IntN(3) == 0 {
			status = http.StatusTooManyRequests
		}
	case chaosGone:
		if since >= r.goneAfter {
			status = http.StatusGone
		}
	case chaosHanging:
		status = 0
	}
	if status/100 == 2 {
		now := time.Now()
		if rec.ok == 0 {
			rec.firstOK = now
		}
		rec.ok++
		r.oks = append(r.oks, now)
	} else {
		rec.refused++
		r.refusals[name] = append(r.refusals[name], time.Now())
	}
	r.mu.Unlock()
	switch status {
	case 0:
		<-req.Context().Done()
		return
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(1))
	}
	w.WriteHeader(status)
}

// Receipt returns what endpoint name saw of event id.
func (r *chaosReceiver) Receipt(name, id string) (chaosReceipt, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.seen[name][id]
	if !ok {
		return chaosReceipt{}, false
	}
	return *rec, true
}

// FirstOKAfter is the first 2xx answer at or after t.
func (r *chaosReceiver) FirstOKAfter(t time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.oks { // in order; the soak asks a few dozen times
		if !at.Before(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// RefusedBetween reports whether endpoint name refused any request (of
// any event) from from to to.
func (r *chaosReceiver) RefusedBetween(name string, from, to time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := r.refusals[name]
	i, _ := slices.BinarySearchFunc(at, from, time.Time.Compare)
	return i < len(at) && !at[i].After(to)
}

// Arrivals is every request to endpoint name (one of trackArrivals) in the
// order they arrived, and the most it held at once.
func (r *chaosReceiver) Arrivals(name string) ([]chaosArrival, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.arrivals[name]), r.mostInFlight[name]
}

// Seen is every event id endpoint name got.
func (r *chaosReceiver) Seen(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.seen[name]))
	for id := range r.seen[name] {
		out = append(out, id)
	}
	return out
}

// statusRecorder notes the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status *int
}

func (w *statusRecorder) WriteHeader(code int) {
	*w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Close ends every request still held, then the server.
func (r *chaosReceiver) Close() { r.srv.Close() }
