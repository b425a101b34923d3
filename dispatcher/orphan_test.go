package dispatcher_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
)

// TestOrphanedTaskIsRecovered: a task a worker dequeued and never ran (the
// dequeue's reply was lost when Redis was killed) is run again by the next
// reconciler pass, not a minute or two later by asynq's own recoverer; a
// task whose lease is still kept is left to its worker.
func TestOrphanedTaskIsRecovered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	// No worker runs while the orphan is made: the next one to start finds
	// it in its first reconciler pass.
	e.worker.Stop()
	ctx := context.Background()
	insp := asynq.NewInspectorFromRedisClient(e.redis)
	rc := newReceiver(t, status(http.StatusNoContent))
	e.endpoint(rc.URL, nil)
	e.publish("a", 2)

	// Two tasks are taken off the queue the way asynq's dequeue script
	// takes them.
	prefix := "asynq:{" + dispatcher.DefaultQueue + "}:"
	now := time.Now()
	var taken []string
	for _, leaseEnds := range []time.Time{now.Add(-dispatcher.OrphanAfter - 2*time.Second), now.Add(30 * time.Second)} {
		id, err := e.redis.RPopLPush(ctx, prefix+"pending", prefix+"active").Result()
		if err != nil {
			t.Fatal(err)
		}
		e.redis.HSet(ctx, prefix+"t:"+id, "state", "active")
		e.redis.HDel(ctx, prefix+"t:"+id, "pending_since")
		e.redis.ZAdd(ctx, prefix+"lease", redis.Z{Score: float64(leaseEnds.Unix()), Member: id})
		taken = append(taken, id)
	}
	orphan, kept := taken[0], taken[1]
	// asynq's own view agrees: both active, one of them orphaned.
	active, err := insp.ListActiveTasks(dispatcher.DefaultQueue)
	if err != nil || len(active) != 2 {
		t.Fatalf("%d active tasks (%v), want 2", len(active), err)
	}
	for _, a := range active {
		if a.IsOrphaned != (a.ID == orphan) {
			t.Fatalf("asynq says task %s orphaned: %v", a.ID, a.IsOrphaned)
		}
	}

	e.worker = e.startWorker()
	e.waitStatus(orphan, webhookd.DeliverySucceeded, 10*time.Second)
	// Another pass leaves the task whose lease is kept alone.
	pass(t, &dispatcher.Reconciler{DB: e.db, Queue: e.worker.Queue, Clock: webhookd.SystemClock{}, Grace: -1})
	info, err := insp.GetTaskInfo(dispatcher.DefaultQueue, kept)
	if err != nil || info.State != asynq.TaskStateActive {
		t.Fatalf("the task whose lease is kept: %v (%v); want it left active", info, err)
	}
	if d := e.delivery(kept); d.AttemptsCount != 0 {
		t.Fatalf("the delivery whose task is kept had %d attempts", d.AttemptsCount)
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
