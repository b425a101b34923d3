package dispatcher_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/storage"
)

// TestBreakerCountedOnlyInPostgreSQL: one failure never reaches
// PostgreSQL's count (its record finds its lease taken, as after a late
// heartbeat voided it), so PostgreSQL counts 2 of the 3 failures and its
// circuit stays closed. The worker must not hold the endpoint's deliveries
// on a count of its own: once the receiver answers 200 again, new events
// go through at once. (Before, the worker's own streak reached the
// threshold and held every automatic attempt, with no probe ever due.)
func TestBreakerCountedOnlyInPostgreSQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dispatcher.Config) {
		c.EndpointInitialLimit = 1
		c.Schedule = dispatcher.Schedule{time.Second, time.Second, time.Second, time.Second, time.Second, time.Second}
		c.Circuit = storage.CircuitConfig{After: 3, Probes: []time.Duration{time.Second}, DisableAfter: -1}
	})
	var mu sync.Mutex
	n := 0
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		switch {
		case k == 2: // this attempt's lease is taken meanwhile: its record will not apply
			e.db.Pool().Exec(context.Background(), `UPDATE deliveries SET lease_owner = 'someone-else', lease_until = now()
				WHERE event_id = $1`, r.Header.Get("X-Event-Id"))
			w.WriteHeader(500)
		case k <= 3:
			w.WriteHeader(500)
		default:
			w.WriteHeader(200)
		}
	})
	ep := e.endpoint(rc.URL, nil)
	e.publish("t", 1)
	waitFor(t, 10*time.Second, "the second request", func() bool { return len(rc.requests()) >= 2 })
	e.publish("t", 1)
	waitFor(t, 15*time.Second, "the third request", func() bool { return len(rc.requests()) >= 3 })
	waitFor(t, 5*time.Second, "two failures counted", func() bool {
		return e.count(`SELECT failures FROM endpoints WHERE id = $1`, ep.ID) >= 2
	})
	for _, id := range e.publish("t", 3) {
		e.waitStatus(id, webhookd.DeliverySucceeded, 10*time.Second)
	}
}

// TestFIFOWindowDeadLetterPassesTheTurn: an ordered endpoint's head that
// becomes a dead letter because its window passed while the circuit was
// open hands the turn on at once, like any head that ends: the next
// delivery is attempted without waiting for the reconciler (an hour here).
func TestFIFOWindowDeadLetterPassesTheTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dispatcher.Config) {
		c.Schedule = dispatcher.Schedule{time.Second, time.Second}
		c.Circuit = storage.CircuitConfig{After: 2, Probes: []time.Duration{time.Hour}, DisableAfter: -1}
	})
	ordered := newOrderedReceiver(t, func(n, try int) bool { return true })
	ep := e.orderedEndpoint(ordered.URL)
	e.publishNumbered("t.fifo", 0, 4, 1)
	waitFor(t, 20*time.Second, "the head dead-lettered", func() bool {
		return e.count(`SELECT count(*) FROM dead_letters WHERE endpoint_id = $1`, ep.ID) >= 1
	})
	// The next heads meet the open circuit with their window passed too
	// (2 s here): each becomes a dead letter and passes the turn on.
	waitFor(t, 10*time.Second, "every delivery of the queue ended", func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status IN ('pending', 'retrying')`, ep.ID) == 0
	})
}

// TestManualRedeliveryWaitsItsTurn: a manual redelivery of a delivery still
// queued behind a failing head of an ordered endpoint does not jump the
// queue: it is served by making the delivery due at once, and it is sent
// only after the head has ended.
func TestManualRedeliveryWaitsItsTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dispatcher.Config) { c.Schedule = dispatcher.Schedule{time.Minute} })
	ordered := newOrderedReceiver(t, func(n, try int) bool { return n == 0 })
	ep := e.orderedEndpoint(ordered.URL)
	e.publishNumbered("t.fifo", 0, 2, 1)
	waitFor(t, 10*time.Second, "the head's first attempt", func() bool { return len(ordered.requests()) >= 1 })
	var second string
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT id FROM deliveries WHERE endpoint_id = $1 ORDER BY fifo_seq DESC LIMIT 1`,
		ep.ID).Scan(&second); err != nil {
		t.Fatal(err)
	}
	e.redeliver(second, "ops")
	waitFor(t, 10*time.Second, "the redelivery served", func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE id = $1 AND manual_request_id IS NULL`, second) == 1
	})
	ordered.mu.Lock()
	seq := append([]int(nil), ordered.seq...)
	ordered.mu.Unlock()
	for _, n := range seq {
		if n == 1 {
			t.Fatalf("event 1 was sent while event 0 ahead of it still waits (requests by event %v)", seq)
		}
	}
	if d := e.delivery(second); d.WaitingReason != webhookd.WaitingFIFOTurn || d.Status != webhookd.DeliveryPending {
		t.Fatalf("the redelivered delivery is %s, waiting %q; want pending, waiting for its turn", d.Status, d.WaitingReason)
	}
}

// aheadClock is a worker's clock that runs ahead of PostgreSQL's.
type aheadClock time.Duration

func (c aheadClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// TestClockAheadDoesNotAttemptEarly: a worker whose own clock runs an hour
// ahead still takes a delivery's time from PostgreSQL's clock: a delivery
// due in 3 s whose task runs now is attempted in 3 s, not at once.
func TestClockAheadDoesNotAttemptEarly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dispatcher.Config) { c.Clock = aheadClock(time.Hour) })
	e.worker.Stop()
	rc := newReceiver(t, status(http.StatusNoContent))
	e.endpoint(rc.URL, nil)
	id := e.publish("a", 1)[0] // its task is due now
	var due time.Time
	if err := e.db.Pool().QueryRow(context.Background(), `UPDATE deliveries SET next_attempt_at = now() + interval '3 seconds'
		WHERE id = $1 RETURNING next_attempt_at`, id).Scan(&due); err != nil {
		t.Fatal(err)
	}
	e.worker = e.startWorker()
	e.waitStatus(id, webhookd.DeliverySucceeded, 15*time.Second)
	if at := rc.requests()[0].at; at.Before(due) {
		t.Fatalf("attempted %v before its time", due.Sub(at))
	}
}

// TestConcurrentFailuresCountedTogether: 30 attempts to one endpoint fail
// at the same moment. Each failure is counted towards the breaker (none
// lost), and they are counted in fewer transactions than failures: the
// outcomes of concurrent attempts share one, instead of queueing one
// transaction per failure on the endpoint row's lock while each attempt
// holds a worker slot.
func TestConcurrentFailuresCountedTogether(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *dispatcher.Config) {
		c.Concurrency = 40
		c.EndpointInitialLimit = 40
		c.HTTP.ResponseTimeout = time.Minute
		c.Schedule = dispatcher.Schedule{time.Hour}
		c.Circuit = storage.CircuitConfig{After: 1000, Probes: []time.Duration{time.Hour}, DisableAfter: -1}
		c.Metrics = reg
	})
	const n = 30
	var open atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		open.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusInternalServerError)
	})
	ep := e.endpoint(rc.URL, nil)
	e.publish("t", n)
	waitFor(t, 10*time.Second, "30 requests open at once", func() bool { return open.Load() == n })
	once.Do(func() { close(release) })
	waitFor(t, 10*time.Second, "every failure counted", func() bool {
		return e.count(`SELECT failures FROM endpoints WHERE id = $1`, ep.ID) == n
	})
	flushes, outcomes := circuitGroups(t, reg)
	if outcomes != n || flushes >= n {
		t.Fatalf("%v outcomes counted in %d transactions, want %d in fewer", outcomes, flushes, n)
	}
	t.Logf("%d failures counted in %d transactions", n, flushes)
}

// circuitGroups reads webhookd_group_commit_size{kind="circuit"}: how many
// flushes of the breaker's outcomes there were, and how many outcomes.
func circuitGroups(t *testing.T, reg *prometheus.Registry) (flushes uint64, outcomes float64) {
	t.Helper()
	m := gathered(t, reg, "webhookd_group_commit_size", "kind", "circuit")
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}
