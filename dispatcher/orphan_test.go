package dispatcher_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/storage"
)

// TestOrphanedTaskIsRecovered: a task a worker dequeued and never ran (the
// dequeue's reply was lost when Redis was killed, or the worker was) stays
// taken in asynq until asynq's own recoverer comes by, a minute or two
// later; the reconciler's next pass finds its delivery overdue, free in
// PostgreSQL and its task taken, and attempts it itself.
func TestOrphanedTaskIsRecovered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	// No worker runs while the orphan is made: the next one to start finds
	// it in its first reconciler pass.
	e.worker.Stop()
	insp := asynq.NewInspectorFromRedisClient(e.redis)
	rc := newReceiver(t, status(http.StatusNoContent))
	e.endpoint(rc.URL, nil)
	ids := e.publish("a", 1)

	id := ids[0]
	orphan(t, e, insp, id)

	e.worker = e.startWorker()
	e.waitStatus(id, webhookd.DeliverySucceeded, 10*time.Second)
	if n := len(rc.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// TestTakenTaskRungInProcessAtItsRetry: a delivery whose task stays taken
// (a worker took it and never ran it, or Redis lost its handler's return:
// "will retry syncing") is attempted by the reconciler without its task.
// When that attempt fails, its retry is rung here at its time: the taken
// task cannot be moved until asynq gives it back, and the reconciler's
// next pass (an hour away here; two seconds past its grace in a default
// worker) is not its bell. The chaos soak saw a rate-limited endpoint's
// deliveries wait 6-7.5 s at each retry after a Redis restart.
func TestTakenTaskRungInProcessAtItsRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.worker.Stop()
	insp := asynq.NewInspectorFromRedisClient(e.redis)
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	e.endpoint(rc.URL, nil)
	id := e.publish("a", 1)[0]
	orphan(t, e, insp, id)

	e.worker = e.startWorker() // its first pass finds the delivery due with its task taken
	e.waitStatus(id, webhookd.DeliverySucceeded, 10*time.Second)
	if got := rc.requests(); len(got) != 2 || got[1].at.Sub(got[0].at) > 3*time.Second {
		t.Fatalf("%d requests (want 2, the retry a second after the first): %v", len(got), got)
	}
}

// orphan takes task id off the queue the way asynq's dequeue script takes
// it, with a lease that asynq keeps for 30 s more, and no worker to run it.
func orphan(t *testing.T, e *env, insp *asynq.Inspector, id string) {
	t.Helper()
	ctx := context.Background()
	prefix := "asynq:{" + dispatcher.DefaultQueue + "}:"
	if n, err := e.redis.LRem(ctx, prefix+"pending", 1, id).Result(); err != nil || n != 1 {
		t.Fatalf("task %s pending: %d (%v), want 1", id, n, err)
	}
	e.redis.LPush(ctx, prefix+"active", id)
	e.redis.HSet(ctx, prefix+"t:"+id, "state", "active")
	e.redis.HDel(ctx, prefix+"t:"+id, "pending_since")
	e.redis.ZAdd(ctx, prefix+"lease", redis.Z{Score: float64(time.Now().Add(30 * time.Second).Unix()), Member: id})
	if info, err := insp.GetTaskInfo(dispatcher.DefaultQueue, id); err != nil || info.State != asynq.TaskStateActive {
		t.Fatalf("task %v (%v), want active", info, err)
	}
}

// TestOrphanedHeadOfAnOrderedQueueIsRecovered: the head of an ordered
// endpoint's queue waits for its turn (its claim found an earlier
// delivery still waiting), that earlier delivery's attempt is recorded but
// its worker dies before passing the turn on, and the head's task sits
// taken by a dead worker. The reconciler's next pass finds the head due
// and free, and attempts it itself rather than waiting for asynq's
// recoverer (a minute or two) with the whole queue behind it.
func TestOrphanedHeadOfAnOrderedQueueIsRecovered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.worker.Stop()
	ctx := context.Background()
	insp := asynq.NewInspectorFromRedisClient(e.redis)
	rc := newReceiver(t, status(http.StatusNoContent))
	e.orderedEndpoint(rc.URL)
	ids := e.publish("a", 3)
	// The first was delivered and recorded; its worker died before it
	// passed the turn, and with it the task of the second, which had
	// found the first ahead of it.
	if _, err := e.db.Pool().Exec(ctx, `UPDATE deliveries SET status = 'succeeded', next_attempt_at = NULL,
		attempts_count = 1 WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Pool().Exec(ctx, `UPDATE deliveries SET waiting_reason = 'fifo_turn' WHERE id = ANY($1)`, ids[1:]); err != nil {
		t.Fatal(err)
	}
	if err := insp.DeleteTask(dispatcher.DefaultQueue, ids[0]); err != nil {
		t.Fatal(err)
	}
	orphan(t, e, insp, ids[1])

	e.worker = e.startWorker()
	for _, id := range ids[1:] {
		e.waitStatus(id, webhookd.DeliverySucceeded, 10*time.Second)
	}
	if n := len(rc.requests()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// TestHeldDeliveryWakesAfterRedisLostItsQueueList: a Redis that lost its
// data lost asynq's set of queues too, and asynq's client never adds a
// queue twice, so asynq then says "no such queue" of every task. A
// delivery held back at its endpoint's cap must still go as soon as a slot
// frees, not sleep out its hold.
func TestHeldDeliveryWakesAfterRedisLostItsQueueList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dispatcher.Config) { c.EndpointInitialLimit = 1 })
	ctx := context.Background()
	release := make(chan struct{})
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	})
	e.endpoint(rc.URL, nil)
	ids := e.publish("a", 2)
	insp := asynq.NewInspectorFromRedisClient(e.redis)
	waitFor(t, 10*time.Second, "one delivery in flight, the other held back asleep", func() bool {
		q, err := insp.GetQueueInfo(dispatcher.DefaultQueue)
		return err == nil && q.Active == 1 && q.Retry == 1 && len(rc.requests()) == 1
	})
	if err := e.redis.SRem(ctx, "asynq:queues", dispatcher.DefaultQueue).Err(); err != nil {
		t.Fatal(err)
	}
	close(release)
	for _, id := range ids {
		e.waitStatus(id, webhookd.DeliverySucceeded, 10*time.Second)
	}
}

// pass makes one reconciler pass, waiting while another process's pass
// holds the leader lock, and tells how many due deliveries it offered.
func pass(t *testing.T, rec *dispatcher.Reconciler) int {
	t.Helper()
	var n int
	waitFor(t, 10*time.Second, "a reconciler pass of our own", func() bool {
		ran, offered, err := rec.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n = offered
		return ran
	})
	return n
}

// TestProbeOfADeliveryWhoseTaskWasOrphaned: an open circuit's probe is
// due, and the delivery it picks has its task taken by a worker that never
// ran it (a dequeue whose reply Redis lost). The probe's own task attempts
// that delivery: its circuit closes now, not once asynq's recoverer or the
// reconciler gives the taken task back (the chaos soak's seed 214994876
// saw the first probe 27 s late).
func TestProbeOfADeliveryWhoseTaskWasOrphaned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dispatcher.Config) {
		c.Circuit = storage.CircuitConfig{After: 3, Probes: []time.Duration{time.Second}}
		c.ReconcileGrace = time.Minute // the reconciler's own rescue of taken tasks is not what is tested
	})
	e.worker.Stop()
	ctx := context.Background()
	insp := asynq.NewInspectorFromRedisClient(e.redis)
	rc := newReceiver(t, status(http.StatusNoContent))
	ep := e.endpoint(rc.URL, nil)
	id := e.publish("a", 1)[0]
	// As a breaker leaves them: the circuit open with its probe due, the
	// delivery waiting for it.
	if _, err := e.db.Pool().Exec(ctx, `UPDATE endpoints SET circuit = 'open', failures = 3, probes = 0,
		probe_at = now(), circuit_opened_at = now(), failing_since = now() WHERE id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Pool().Exec(ctx, `UPDATE deliveries SET waiting_reason = 'circuit_open',
		next_attempt_at = now() + interval '1 hour' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	orphan(t, e, insp, id)
	if _, err := e.worker.Queue.EnqueueProbe(ctx, ep.ID, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	e.worker = e.startWorker()
	e.waitStatus(id, webhookd.DeliverySucceeded, 10*time.Second)
	waitFor(t, 5*time.Second, "the circuit closed by the probe's success", func() bool {
		got, _ := e.db.Store().GetEndpoint(ctx, e.project.ID, ep.ID)
		return got.Circuit == webhookd.CircuitClosed
	})
}

// TestOverdueProbeWhoseTaskWasTakenIsMade: an open circuit's probe is
// overdue and its task is taken (active) by a worker that never ran it,
// or whose handler's return Redis lost. The reconciler makes the probe
// itself: asynq would give the task back only once its lease runs out
// (the chaos soak's first probe came 30.6 s late).
func TestOverdueProbeWhoseTaskWasTakenIsMade(t *testing.T) {
	t.Parallel()
	e, id := overdueProbe(t, func(e *env, task *asynq.Task, taskID string) {
		if _, err := asynq.NewClientFromRedisClient(e.redis).Enqueue(task, asynq.TaskID(taskID),
			asynq.Queue(dispatcher.DefaultQueue)); err != nil {
			t.Fatal(err)
		}
		orphan(t, e, asynq.NewInspectorFromRedisClient(e.redis), taskID)
	})
	e.worker = e.startWorker() // its first reconciler pass finds the probe overdue
	e.waitStatus(id, webhookd.DeliverySucceeded, 10*time.Second)
}

// TestOverdueProbeWhoseTaskSleepsIsWoken: an open circuit's probe came due
// while PostgreSQL was out of reach, so its task's handler failed and
// asynq's retry put it to sleep (backing off up to 5 s a time; an hour
// here). The reconciler finds the probe overdue and runs its task now:
// enqueueing it again is refused (the task id is live), which alone left
// the chaos soak's first probe 16.5 s late.
func TestOverdueProbeWhoseTaskSleepsIsWoken(t *testing.T) {
	t.Parallel()
	e, id := overdueProbe(t, func(e *env, task *asynq.Task, taskID string) {
		if _, err := asynq.NewClientFromRedisClient(e.redis).Enqueue(task, asynq.TaskID(taskID),
			asynq.Queue(dispatcher.DefaultQueue), asynq.ProcessIn(time.Hour)); err != nil {
			t.Fatal(err)
		}
	})
	e.worker = e.startWorker() // its first reconciler pass finds the probe overdue
	e.waitStatus(id, webhookd.DeliverySucceeded, 10*time.Second)
}

// overdueProbe makes, with no worker running, an endpoint whose circuit is
// open with its probe due 3 s ago and one delivery waiting for it, and
// hands place the probe's task (its id names the probe's time) to put
// where the test wants it. It returns the env and the delivery's id.
func overdueProbe(t *testing.T, place func(e *env, task *asynq.Task, taskID string)) (*env, string) {
	e := newEnv(t, func(c *dispatcher.Config) {
		c.Circuit = storage.CircuitConfig{After: 3, Probes: []time.Duration{time.Second}}
	})
	e.worker.Stop()
	ctx := context.Background()
	rc := newReceiver(t, status(http.StatusNoContent))
	ep := e.endpoint(rc.URL, nil)
	id := e.publish("a", 1)[0]
	var probeAt time.Time
	if err := e.db.Pool().QueryRow(ctx, `UPDATE endpoints SET circuit = 'open', failures = 3, probes = 0,
		probe_at = now() - interval '3 seconds', circuit_opened_at = now(), failing_since = now() WHERE id = $1
		RETURNING probe_at`, ep.ID).Scan(&probeAt); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Pool().Exec(ctx, `UPDATE deliveries SET waiting_reason = 'circuit_open',
		next_attempt_at = now() + interval '1 hour' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	place(e, asynq.NewTask(dispatcher.TaskProbe, []byte(ep.ID)), "probe:"+ep.ID+":"+strconv.FormatInt(probeAt.UnixMilli(), 10))
	return e, id
}
