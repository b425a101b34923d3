package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
)

// Task types on the queue.
const (
	TaskDelivery = "webhookd:delivery" // an attempt of one delivery, TaskID = delivery id (manual: a request id)
	TaskJob      = "webhookd:job"      // a background job, TaskID = job id
	TaskProbe    = "webhookd:probe"    // the probe of an open circuit, TaskID = probe:<endpoint id>:<probe time>
	TaskRegister = "webhookd:register" // a no-op that lists the queue in asynq again (Queue.Register)
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
	client    *asynq.Client
	inspector *asynq.Inspector
	rdb       redis.UniversalClient
	queue     string
	timeout   time.Duration
	// stuck, if set, rings a delivery whose task stayed taken (active)
	// through every try to wake or move it, at the time it should have
	// woken: a worker took the task and never ran it, or its handler's
	// return was lost with Redis ("will retry syncing"), and asynq gives
	// it back only when its lease runs out. Without it the delivery waits
	// for the reconciler's grace at every turn.
	stuck func(context.Context, []webhookd.ScheduledDelivery)
}

// stuckHorizon bounds how far ahead a taken task's delivery is rung
// in-process (Queue.stuck): by then asynq has given the task back.
const stuckHorizon = time.Minute

// NewQueue returns a Queue on rdb (which the caller closes). taskTimeout
// bounds one attempt and must exceed the HTTP timeouts.
func NewQueue(rdb redis.UniversalClient, queue string, taskTimeout time.Duration) *Queue {
	if queue == "" {
		queue = DefaultQueue
	}
	return &Queue{client: asynq.NewClientFromRedisClient(rdb), inspector: asynq.NewInspectorFromRedisClient(rdb), rdb: rdb,
		queue: queue, timeout: taskTimeout}
}

// Enqueue schedules an automatic attempt of each delivery at its due time,
// with TaskID = delivery id, so a delivery can never have two live tasks.
// A delivery already queued is not an error.
func (q *Queue) Enqueue(ctx context.Context, ds ...webhookd.ScheduledDelivery) error {
	_, _, err := q.offer(ctx, ds, false)
	return err
}

// offer enqueues ds. With wake (the reconciler's offer of deliveries
// overdue in PostgreSQL), a delivery with a live task whose task sleeps
// (scheduled or retrying past its due time) runs now, and one whose task a
// worker took (active) is returned in taken, for the caller to attempt. asynq v0.26 enqueues one task
// per round trip; many travel side by side instead of one after another.
func (q *Queue) offer(ctx context.Context, ds []webhookd.ScheduledDelivery, wake bool) (created int, taken []webhookd.ScheduledDelivery, err error) {
	var (
		mu   sync.Mutex
		errs []error
	)
	one := func(d webhookd.ScheduledDelivery) {
		ok, err := q.enqueue(ctx, d.ID, deliveryTask{DeliveryID: d.ID, EndpointID: d.EndpointID}, d.DueAt)
		running := false
		if err == nil && !ok && wake { // a live task: awake, asleep, or taken
			running = isRunning(q.inspector.RunTask(q.queue, d.ID))
		}
		if err == nil && !ok && !running {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			errs = append(errs, err)
		case running:
			taken = append(taken, d)
		default:
			created++
		}
	}
	inParallel(len(ds), func(i int) { one(ds[i]) })
	return created, taken, errors.Join(errs...)
}

// inParallel runs f(0) … f(n-1) and returns when all have returned:
// enqueueParallelism goroutines take them in turn (not one goroutine per
// item: a batch has thousands), or the caller's alone for one.
func inParallel(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range min(enqueueParallelism, n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
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
	_, err := q.enqueueTask(ctx, asynq.NewTask(TaskJob, []byte(jobID)), jobID, time.Time{}, time.Hour)
	return err
}

// enqueue enqueues a delivery task (enqueueTask).
func (q *Queue) enqueue(ctx context.Context, taskID string, t deliveryTask, at time.Time) (bool, error) {
	payload, err := json.Marshal(t)
	if err != nil {
		return false, err
	}
	return q.enqueueTask(ctx, asynq.NewTask(TaskDelivery, payload), taskID, at, q.timeout)
}

// enqueueTask tells whether it made a new task: false, and no error, when
// the task id was live already.
func (q *Queue) enqueueTask(ctx context.Context, task *asynq.Task, id string, at time.Time, timeout time.Duration) (bool, error) {
	opts := []asynq.Option{asynq.TaskID(id), asynq.Queue(q.queue), asynq.MaxRetry(maxRetry), asynq.Timeout(timeout)}
	if !at.IsZero() {
		opts = append(opts, asynq.ProcessAt(notBefore(at)))
	}
	_, err := q.client.EnqueueContext(ctx, task, opts...)
	switch {
	case errors.Is(err, asynq.ErrTaskIDConflict):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("enqueue %s: %w", id, err)
	}
	return true, nil
}

// notBefore is at as asynq should be given it: asynq keeps a task's time in
// whole seconds, cut, so a task for later is made for the next whole second
// instead, never early. A task that ran before its delivery was due would
// find it not due, and one held back for room then would sleep for the hold
// (holdFor) with PostgreSQL's hold not written (storage.HoldBack holds only
// due deliveries).
func notBefore(at time.Time) time.Time {
	if up := at.Truncate(time.Second); up.Before(at) && at.After(time.Now()) {
		return up.Add(time.Second)
	}
	return at
}

// maxRetry is effectively unbounded: PostgreSQL counts attempts and decides
// when a delivery is dead, and asynq must never archive one of our tasks
// (an archived TaskID would block the reconciler's re-enqueue).
const maxRetry = 1 << 30

// Pending tells how many tasks wait in the queue for a worker.
func (q *Queue) Pending(ctx context.Context) (int, error) {
	info, err := q.inspector.GetQueueInfo(q.queue)
	if err != nil {
		return 0, fmt.Errorf("queue info: %w", err)
	}
	return info.Pending, nil
}

// Register makes asynq list the queue again. asynq's client lists a queue
// on its first enqueue and never again, so after Redis lost its data the
// queue is missing from the list, and asynq's Inspector (RunTask,
// GetQueueInfo) answers ErrQueueNotFound although its tasks run. Through
// asynq's public API only: when Inspector.Queues lacks the queue, a new
// client (which has listed nothing yet) enqueues a no-op task there
// (TaskRegister), which lists it.
func (q *Queue) Register(ctx context.Context) error {
	qs, err := q.inspector.Queues()
	if err != nil {
		return fmt.Errorf("asynq queues: %w", err)
	}
	if slices.Contains(qs, q.queue) {
		return nil
	}
	// A client from a shared Redis client has nothing of its own to close.
	_, err = asynq.NewClientFromRedisClient(q.rdb).EnqueueContext(ctx, asynq.NewTask(TaskRegister, nil),
		asynq.Queue(q.queue), asynq.TaskID(TaskRegister), asynq.MaxRetry(0))
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return fmt.Errorf("list queue %s: %w", q.queue, err)
	}
	return nil
}

// Wake runs the tasks ids (of endpoint ep's deliveries) now (asynq's Inspector.RunTask: a task asleep
// in the scheduled or retry set moves to pending): their deliveries were
// made due in PostgreSQL before. A task still running (its handler held
// the delivery back and has not returned yet) is tried again a few times
// over the next moments; one that is gone (Redis lost it) gets a new task,
// due now. Should all that fail, the reconciler finds the delivery due
// with no task awake and wakes it. The tasks are run side by side, as
// Enqueue's are: one after another, a wake of a hundred took 200 ms on a
// loaded machine, and the last woken waited for all the others.
func (q *Queue) Wake(ctx context.Context, ep string, ids ...string) {
	var (
		mu      sync.Mutex
		running []string
	)
	inParallel(len(ids), func(i int) {
		id := ids[i]
		err := q.inspector.RunTask(q.queue, id)
		if errors.Is(err, asynq.ErrQueueNotFound) && q.Register(ctx) == nil {
			// Redis lost asynq's list of queues (its client adds a queue
			// only on its first enqueue), not necessarily the task.
			err = q.inspector.RunTask(q.queue, id)
		}
		switch {
		case err == nil:
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			q.enqueue(ctx, id, deliveryTask{DeliveryID: id, EndpointID: ep}, time.Time{})
		case isRunning(err):
			mu.Lock()
			running = append(running, id)
			mu.Unlock()
		}
	})
	retryRunning(running, func(id string) error { return q.inspector.RunTask(q.queue, id) },
		func(id string) { q.taken(ep, id, time.Now()) })
}

// taken rings delivery id of ep at at without its task, which stayed
// taken through every try to wake or move it (Queue.stuck).
func (q *Queue) taken(ep, id string, at time.Time) {
	if q.stuck != nil && time.Until(at) < stuckHorizon {
		q.stuck(context.Background(), []webhookd.ScheduledDelivery{{ID: id, EndpointID: ep, DueAt: at}})
	}
}

// retryRunning tries op again on each of ids, a few times over the next
// moments, while it finds the task running (isRunning): its handler, about
// to return, holds it. Those still running after the last try go to
// gaveUp. It does not wait.
func retryRunning(ids []string, op func(id string) error, gaveUp func(id string)) {
	if len(ids) == 0 {
		return
	}
	go func() {
		for try := 0; try < 8 && len(ids) > 0; try++ {
			time.Sleep(time.Duration(try+1) * 20 * time.Millisecond) // the handler's return, a moment away
			left := ids[:0]
			for _, id := range ids {
				if isRunning(op(id)) {
					left = append(left, id)
				}
			}
			ids = left
		}
		for _, id := range ids {
			gaveUp(id)
		}
	}()
}

// isRunning tells RunTask's or DeleteTask's refusal of an active task
// (asynq v0.26 has no error value for it, only FailedPrecondition texts).
func isRunning(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "already running") || strings.Contains(err.Error(), "in active state"))
}

// Drop deletes the sleeping task id, whose delivery is done (made by an
// attempt other than its task's: a chained one of an ordered queue, a
// handed-on one): else it would wake, once, to find it done. A task still
// running (its handler held the delivery back and has not returned yet) is
// deleted once it sleeps; any other error leaves it, to wake and find its
// delivery done. It does not wait.
func (q *Queue) Drop(id string) {
	drop := func(id string) error { return q.inspector.DeleteTask(q.queue, id) }
	go func() {
		if isRunning(drop(id)) {
			retryRunning([]string{id}, drop, func(string) {}) // done: its delivery needs no bell
		}
	}()
}

// settle brings delivery id's own task in line with an attempt made
// without it (res, err: what Attempt returned): dropped once the delivery
// is done, moved to the time the attempt asks for, or woken to try again
// when the attempt failed (PostgreSQL unreachable, say).
func (q *Queue) settle(ctx context.Context, ep, id string, res Result, err error) {
	var at *RetryAt
	switch {
	case errors.As(err, &at):
		q.Reschedule(context.WithoutCancel(ctx), ep, id, at.At)
	case err != nil:
		q.Wake(context.WithoutCancel(ctx), ep, id)
	case res.Status != webhookd.DeliveryPending && res.Status != webhookd.DeliveryRetrying:
		q.Drop(id)
	}
}

// Reschedule moves delivery id's sleeping task to at: deleted, then made
// again. A task still running is moved once it sleeps (retryRunning), so
// that a delivery attempted by another than its task does not wait for
// the time its task's handler is about to sleep until.
func (q *Queue) Reschedule(ctx context.Context, ep, id string, at time.Time) error {
	move := func(id string) error {
		if err := q.inspector.DeleteTask(q.queue, id); isRunning(err) {
			return err
		}
		return q.Enqueue(context.WithoutCancel(ctx), webhookd.ScheduledDelivery{ID: id, EndpointID: ep, DueAt: at})
	}
	err := move(id)
	if isRunning(err) {
		retryRunning([]string{id}, move, func(id string) { q.taken(ep, id, at) })
		return nil
	}
	return err
}

// EnqueueProbe schedules the wake-up of endpoint ep's probe at at: the
// task makes the longest-waiting delivery held by the circuit due, and
// wakes it (Worker.probe). Its id names the probe's time, so each
// probe has one task however often it is offered. With wake (the
// reconciler's offer of a probe overdue in PostgreSQL), a task that sleeps
// past its time runs now: its handler failed (PostgreSQL out of reach, say)
// and asynq's retry backs off up to errorRetryMax, each time; and taken
// tells whether a worker holds the task (active).
func (q *Queue) EnqueueProbe(ctx context.Context, ep string, at time.Time, wake bool) (taken bool, err error) {
	id := "probe:" + ep + ":" + strconv.FormatInt(at.UnixMilli(), 10)
	made, err := q.enqueueTask(ctx, asynq.NewTask(TaskProbe, []byte(ep)), id, at, q.timeout)
	if err == nil && !made && wake {
		taken = isRunning(q.inspector.RunTask(q.queue, id)) // refused otherwise: pending, on its way
	}
	return taken, err
}

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
