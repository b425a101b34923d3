package dispatcher

import (
	"sync"
	"sync/atomic"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
)

// Task types on the queue.
const (
	TaskDelivery = "webhookd:delivery" // an attempt of one delivery, TaskID = delivery id (manual: a request id)
	TaskJob      = "webhookd:job"      // a background job, TaskID = job id
)

// DefaultQueue is the asynq queue webhookd uses.
const DefaultQueue = "webhookd"

// deliveryTask is the payload of a TaskDelivery.
type deliveryTask struct {
	DeliveryID string `json:"delivery_id"`
	EndpointID string `json:"endpoint_id,omitempty"` // automatic attempts: the endpoint, for its in-flight cap
	Manual     bool   `json:"manual,omitempty"`
	RequestID  string `json:"request_id,omitempty"` // the redelivery request, for manual attempts
	By         string `json:"by,omitempty"`         // who asked, for manual attempts
}

// Queue hands work to asynq. It is only a schedule: PostgreSQL stays the
// authority, and the reconciler re-enqueues whatever did not arrive.
type Queue struct {
	client  *asynq.Client
	rdb     redis.UniversalClient
	queue   string
	timeout time.Duration
}

// NewQueue returns a Queue on rdb (which the caller closes). taskTimeout
// bounds one attempt and must exceed the HTTP timeouts.
func NewQueue(rdb redis.UniversalClient, queue string, taskTimeout time.Duration) *Queue {
	if queue == "" {
		queue = DefaultQueue
	}
	return &Queue{client: asynq.NewClientFromRedisClient(rdb), rdb: rdb, queue: queue, timeout: taskTimeout}
}

// Enqueue schedules an automatic attempt of each delivery at its due time,
// with TaskID = delivery id, so a delivery can never have two live tasks.
// A delivery already queued is not an error.
func (q *Queue) Enqueue(ctx context.Context, ds ...webhookd.ScheduledDelivery) error {
	_, err := q.EnqueueCounting(ctx, ds...)
	return err
}

// EnqueueCounting is Enqueue, and tells how many deliveries got a new task
// (the others had a live one). asynq v0.26 enqueues one task per round
// trip; many travel side by side instead of one after another.
func (q *Queue) EnqueueCounting(ctx context.Context, ds ...webhookd.ScheduledDelivery) (created int, err error) {
	if len(ds) == 1 {
		d := ds[0]
		ok, err := q.enqueue(ctx, d.ID, deliveryTask{DeliveryID: d.ID, EndpointID: d.EndpointID}, d.DueAt)
		if ok {
			created = 1
		}
		return created, err
	}
	// enqueueParallelism goroutines take the deliveries in turn (not one
	// goroutine per delivery: a batch has thousands).
	var (
		mu   sync.Mutex
		errs []error
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range min(enqueueParallelism, len(ds)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(ds); i = int(next.Add(1)) - 1 {
				d := ds[i]
				ok, err := q.enqueue(ctx, d.ID, deliveryTask{DeliveryID: d.ID, EndpointID: d.EndpointID}, d.DueAt)
				if err == nil && !ok {
					continue
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					created++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return created, errors.Join(errs...)
}

// enqueueParallelism bounds the enqueues of one Enqueue call in flight at
// once. On a client that pipelines concurrent scripts
// (internal/redisbatch) they travel together; on a plain one each takes a
// connection of the pool (10 per CPU).
const enqueueParallelism = 64

// EnqueueManual schedules the redelivery requestID of a delivery now, beside
// any automatic task it has. The request must be recorded in PostgreSQL
// first (storage RequestRedelivery): the attempt checks it there, and the
// reconciler re-enqueues it from there.
func (q *Queue) EnqueueManual(ctx context.Context, requestID, deliveryID, by string) error {
	_, err := q.enqueue(ctx, requestID, deliveryTask{DeliveryID: deliveryID, Manual: true, RequestID: requestID, By: by}, time.Time{})
	return err
}

// EnqueueJob schedules a background job now.
func (q *Queue) EnqueueJob(ctx context.Context, jobID string) error {
	err := q.enqueueTask(ctx, asynq.NewTask(TaskJob, []byte(jobID)), jobID, time.Time{}, time.Hour)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil
	}
	return err
}

// enqueue tells whether it made a new task: false, and no error, when the
// task id was live already.
func (q *Queue) enqueue(ctx context.Context, taskID string, t deliveryTask, at time.Time) (bool, error) {
	payload, err := json.Marshal(t)
	if err != nil {
		return false, err
	}
	err = q.enqueueTask(ctx, asynq.NewTask(TaskDelivery, payload), taskID, at, q.timeout)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return false, nil // already queued
	}
	return err == nil, err
}

func (q *Queue) enqueueTask(ctx context.Context, task *asynq.Task, id string, at time.Time, timeout time.Duration) error {
	opts := []asynq.Option{asynq.TaskID(id), asynq.Queue(q.queue), asynq.MaxRetry(maxRetry), asynq.Timeout(timeout)}
	if !at.IsZero() {
		opts = append(opts, asynq.ProcessAt(at))
	}
	if _, err := q.client.EnqueueContext(ctx, task, opts...); err != nil {
		return fmt.Errorf("enqueue %s: %w", id, err)
	}
	return nil
}

// maxRetry is effectively unbounded: PostgreSQL counts attempts and decides
// when a delivery is dead, and asynq must never archive one of our tasks
// (an archived TaskID would block the reconciler's re-enqueue).
const maxRetry = 1 << 30

// heldPrefix prefixes the holder's Redis keys: prefix + endpoint id is the
// sorted set of that endpoint's held task ids, prefix + "endpoints" the set
// of endpoints with held ones. Its hash tag is the queue's, as in asynq's
// own keys, so that one Redis Cluster slot has both for the wake script.
func (q *Queue) heldPrefix() string { return "webhookd:{" + q.queue + "}:held:" }

// Register adds the queue to asynq's set of queues. asynq's client adds it
// on its first enqueue and never again, so after Redis lost its data the
// queue is missing there, and asynq's Inspector (RunTask, GetQueueInfo)
// answers ErrQueueNotFound although its tasks run.
func (q *Queue) Register(ctx context.Context) error {
	return q.rdb.SAdd(ctx, "asynq:queues", q.queue).Err()
}

// OrphanAfter is how long after its lease ran out an active task counts as
// orphaned. A worker extends the leases of the tasks it runs every 5 s to
// 30 s ahead, so a lease 10 s past its end has missed every extension for
// 40 s: no worker holds the task.
const OrphanAfter = 10 * time.Second

// RecoverOrphans puts every orphaned task of the queue back in front of
// its pending list and tells how many it moved. A task is orphaned when a
// worker dequeued it but never ran it: Redis was killed after the dequeue
// script ran and before its reply arrived, or the worker was killed. asynq
// recovers such a task only after its lease plus 30 s, on a recoverer that
// runs once a minute (60 to 120 s in all); and until then its TaskID is
// live, so the reconciler cannot offer the delivery again. PostgreSQL's
// claim still decides whether an attempt is made, so a task taken back from
// a worker that was only stalled (not dead) costs a claim, not a second
// attempt.
//
// It follows asynq v0.26's key layout (the lease sorted set of task ids
// scored by expiry in Unix seconds, the active and pending lists, the task
// hash), as its dequeue and recoverer scripts do; TestOrphanedTaskIsRecovered
// checks the layout against asynq's own Inspector.
func (q *Queue) RecoverOrphans(ctx context.Context, now time.Time) (int, error) {
	return q.recoverLeasedBefore(ctx, now, now.Add(-OrphanAfter))
}

// asynqLease is how far ahead a worker's heartbeat (every 5 s) extends the
// leases of the tasks it runs, in whole seconds (asynq v0.26).
const asynqLease = 30 * time.Second

// RecoverDeadWorkersTasks is RecoverOrphans for the moments after a worker
// was found dead (its heartbeat in PostgreSQL stopped): an active task
// whose lease was not extended for 9 s has missed its worker's last
// extension (a live worker extends every 5 s, and a lease is cut to whole
// seconds), so it is put back now rather than 10 s after its lease ends.
// These are the tasks the dead worker had taken but not yet claimed in
// PostgreSQL, which no voided lease names.
func (q *Queue) RecoverDeadWorkersTasks(ctx context.Context, now time.Time) (int, error) {
	return q.recoverLeasedBefore(ctx, now, now.Add(asynqLease-9*time.Second))
}

// recoverLeasedBefore puts back every active task whose lease ends before
// cutoff.
func (q *Queue) recoverLeasedBefore(ctx context.Context, now, cutoff time.Time) (int, error) {
	prefix := "asynq:{" + q.queue + "}:"
	n, err := recoverOrphans.Run(ctx, q.rdb, []string{prefix + "lease", prefix + "active", prefix + "pending"},
		cutoff.Unix(), prefix+"t:", now.UnixNano(), 1000).Int()
	if err != nil {
		return 0, fmt.Errorf("recover orphaned tasks: %w", err)
	}
	return n, nil
}

// recoverOrphans: KEYS lease, active, pending; ARGV cutoff (Unix s), task
// key prefix, pending_since (Unix ns), most to move.
var recoverOrphans = redis.NewScript(`
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", "(" .. ARGV[1], "LIMIT", 0, ARGV[4])
local n = 0
for _, id in ipairs(ids) do
	redis.call("ZREM", KEYS[1], id)
	local key = ARGV[2] .. id
	if redis.call("LREM", KEYS[2], 0, id) > 0 and redis.call("EXISTS", key) == 1 then
		redis.call("HSET", key, "state", "pending", "pending_since", ARGV[3])
		redis.call("RPUSH", KEYS[3], id)
		n = n + 1
	end
end
return n`)

// RequeueActive puts the tasks ids back in front of the pending list where
// they are active (a worker dequeued them), and tells which it moved. It
// is for the tasks of a worker known to be dead (its heartbeat stopped):
// asynq would take them back only once their lease ran out and its
// recoverer came by (60 to 120 s). Should the worker be alive after all,
// PostgreSQL's claim still decides which attempt is made. Same key layout
// as RecoverOrphans.
func (q *Queue) RequeueActive(ctx context.Context, ids []string, now time.Time) ([]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	prefix := "asynq:{" + q.queue + "}:"
	args := make([]any, 0, len(ids)+2)
	args = append(args, prefix+"t:", now.UnixNano())
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := requeueActive.Run(ctx, q.rdb, []string{prefix + "lease", prefix + "active", prefix + "pending"}, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("requeue active tasks: %w", err)
	}
	moved := make([]bool, len(ids))
	for i := range moved {
		moved[i] = i < len(res) && res[i] == 1
	}
	return moved, nil
}

// requeueActive: KEYS lease, active, pending; ARGV task key prefix,
// pending_since (Unix ns), then the task ids. Returns 1 per id moved, 0
// per id that was not active.
var requeueActive = redis.NewScript(`
local out = {}
for i = 3, #ARGV do
	local id = ARGV[i]
	local key = ARGV[1] .. id
	out[#out + 1] = 0
	if redis.call("LREM", KEYS[2], 0, id) > 0 then
		redis.call("ZREM", KEYS[1], id)
		if redis.call("EXISTS", key) == 1 then
			redis.call("HSET", key, "state", "pending", "pending_since", ARGV[2])
			redis.call("RPUSH", KEYS[3], id) -- asynq dequeues from the right: the front
			out[#out] = 1
		end
	end
end
return out`)

// lostMarker is a key the workers keep in Redis: when it is gone, Redis
// lost its data (a restart without persistence, FLUSHDB, a failover to an
// empty replica), and with it every task; the reconciler then rebuilds the
// schedule at once instead of on its next pass.
func (q *Queue) lostMarker() string { return "webhookd:{" + q.queue + "}:alive" }

// CheckLost tells whether Redis lost its data since the last check (or is
// new), and sets the marker again. Redis unreachable is an error, not a
// loss.
func (q *Queue) CheckLost(ctx context.Context) (bool, error) {
	set, err := q.rdb.SetNX(ctx, q.lostMarker(), "1", 0).Result()
	if err != nil {
		return false, fmt.Errorf("check redis data: %w", err)
	}
	return set, nil
}
