package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/webhookd/webhookd/internal/testenv"
)

// TestFIFOUnderFaults sends 1,000 events one after another to an ordered
// endpoint (ordering fifo, made through the API) and an ordinary one,
// with two workers, while the ordered receiver fails the first try of
// every 40th event, one worker is killed with SIGKILL and Redis loses all
// its data. Every event reaches both endpoints, and the ordered one gets
// its requests one at a time and in the order the events were accepted:
// a repeat (a retry, or an attempt cut by the kill) may come again, but
// never after a later event.
func TestFIFOUnderFaults(t *testing.T) {
	t.Parallel()
	const events = 1000
	_, dbURL := testenv.Schema(t)
	d := newDrill(t, dbURL)
	rdb, redisURL := testenv.Redis(t)
	d.startAPI(redisURL)
	a := d.startWorker(redisURL)
	d.startWorker(redisURL)
	d.addEndpoints(1)

	var (
		mu        sync.Mutex
		index     = map[string]int{} // event id → its place in acceptance order
		arrivals  []int              // the ordered endpoint's requests, by that place
		tries     = map[string]int{}
		inFlight  atomic.Int32
		most      atomic.Int32
		orderedOK atomic.Int32
	)
	d.answer = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/fifo" {
			w.WriteHeader(http.StatusNoContent)
			return true
		}
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		id := r.Header.Get("webhook-id")
		mu.Lock()
		i, known := index[id]
		if !known {
			i = -1 // accepted, but its answer is not in yet: checked below
		}
		arrivals = append(arrivals, i)
		tries[id]++
		fail := known && i%40 == 7 && tries[id] == 1
		mu.Unlock()
		time.Sleep(time.Millisecond)
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
			return false
		}
		orderedOK.Add(1)
		w.WriteHeader(http.StatusOK)
		return true
	}
	status, _, out := d.post("/v1/endpoints", uuid.NewString(), fmt.Sprintf(`{"url":%q,"ordering":"fifo"}`, d.base+"/fifo"))
	if status != http.StatusCreated || out["ordering"] != "fifo" {
		t.Fatalf("POST /v1/endpoints with ordering fifo: %d %v", status, out)
	}
	d.mu.Lock()
	d.endpoints[out["id"].(string)] = "/fifo"
	d.mu.Unlock()

	killed, flushed := false, false
	for n := range events {
		// One at a time, the same key again until an answer is in: the
		// order of the answers is the order of acceptance.
		key := uuid.NewString()
		var id string
		for id == "" {
			status, _, out := d.post("/v1/events", key, `{"type":"drill.tick","data":{"n":`+strconv.Itoa(n)+`}}`)
			if status != http.StatusAccepted {
				t.Logf("event %d: %d %v; again with the same key", n, status, out)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			id = out["id"].(string)
			d.mu.Lock()
			for _, x := range out["deliveries"].([]any) {
				dl := x.(map[string]any)
				d.want[d.endpoints[dl["endpoint_id"].(string)]+" "+id] = dl["id"].(string)
			}
			d.mu.Unlock()
			mu.Lock()
			index[id] = n
			mu.Unlock()
		}
		switch {
		case !killed && orderedOK.Load() >= 300:
			killed = true
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			t.Logf("worker A killed after %d events were accepted", n+1)
		case !flushed && orderedOK.Load() >= 600:
			flushed = true
			if err := rdb.FlushDB(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			t.Logf("Redis flushed after %d events were accepted", n+1)
		}
		time.Sleep(2 * time.Millisecond) // a steady stream, so the faults land mid-queue
	}
	if !killed || !flushed {
		t.Logf("the queue kept up: faults so far killed %v, flushed %v; injecting the rest now", killed, flushed)
		if !killed {
			a.cmd.Process.Signal(syscall.SIGKILL)
		}
		if !flushed {
			rdb.FlushDB(context.Background())
		}
	}
	d.verify(180 * time.Second)

	mu.Lock()
	defer mu.Unlock()
	if m := most.Load(); m != 1 {
		t.Errorf("the ordered endpoint had %d requests in flight at once, want 1", m)
	}
	for j := 1; j < len(arrivals); j++ {
		if arrivals[j] < 0 || arrivals[j-1] < 0 {
			// A request came before its event's answer: only the newest
			// event can be in that state; it is checked by the ledger.
			continue
		}
		if arrivals[j] < arrivals[j-1] {
			t.Fatalf("the ordered endpoint got event #%d after event #%d (requests %d and %d): out of order",
				arrivals[j], arrivals[j-1], j, j-1)
		}
	}
	t.Logf("ordered endpoint: %d events in %d requests, one at a time, in acceptance order", events, len(arrivals))
}
