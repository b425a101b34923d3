package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
)

// holdFor is how long a held-back task sleeps in asynq's retry set unless
// the holder wakes it sooner. No path of the holder lets a held task's id
// leave its set while the task sleeps (a wake moves the task in the same
// script), so it is only a last resort; long, so that a backlog held back
// for hours is not run every few minutes just to be held back again.
const holdFor = time.Hour

// holder keeps deliveries that their endpoint cannot take yet (at its
// in-flight cap, or over its rate_limit_per_second) out of everyone's way,
// and manual attempts too (at the cap). A held delivery's task sleeps in
// asynq's retry set, which costs nothing while it waits, and its task id
// waits in a Redis sorted set per endpoint, scored by when it may go.
// When the endpoint has room again (a slot freed in this process, or the
// periodic pass finds one), the holder moves the longest-waiting ids'
// tasks back to pending. Nothing is polled per held delivery, so a backlog
// of B held deliveries costs nothing per second.
//
// Redis holds only the schedule, as everywhere: a held delivery is still
// due in PostgreSQL (a held manual attempt's request is still recorded
// there). While its id is in its endpoint's set, the reconciler leaves it
// to the holder (of any worker process: the sets are shared); if Redis is
// lost, the sets go with the tasks, and the reconciler enqueues it again.
type holder struct {
	rdb      redis.UniversalClient
	queue    *Queue
	gate     *gate
	prefix   string // of the sorted sets; prefix + "endpoints" lists the endpoints with held deliveries
	clock    webhookd.Clock
	log      *slog.Logger
	interval time.Duration
	held     *prometheus.CounterVec // by reason

	mu    sync.Mutex
	known map[string]struct{} // endpoints that may have held deliveries: parked here, or seen in the last pass

	loop
}

func newHolder(rdb redis.UniversalClient, q *Queue, g *gate, clock webhookd.Clock, log *slog.Logger,
	held *prometheus.CounterVec) *holder {
	return &holder{rdb: rdb, held: held, queue: q, gate: g, prefix: q.heldPrefix(), clock: clock, log: log,
		interval: 100 * time.Millisecond, known: map[string]struct{}{}}
}

func (h *holder) key(ep string) string { return h.prefix + ep }
func (h *holder) endpointsKey() string { return h.prefix + "endpoints" }

// hold parks the task id (a delivery id, or a manual attempt's request id)
// of endpoint ep until at (or until the endpoint has room) and returns
// what the task's handler returns: a retry far off.
func (h *holder) hold(ctx context.Context, ep, id string, at time.Time, reason string) error {
	if err := h.park(ctx, ep, id, at); err != nil { // cannot hold it: try again soon instead
		return &RetryAt{At: h.clock.Now().Add(time.Second), Reason: reason}
	}
	h.remember(ep)
	h.held.WithLabelValues(reason).Inc()
	return &RetryAt{At: h.clock.Now().Add(holdFor), Reason: "held back: " + reason}
}

// remember notes that ep may have held tasks, so a slot freed there
// wakes them.
func (h *holder) remember(ep string) {
	h.mu.Lock()
	h.known[ep] = struct{}{}
	h.mu.Unlock()
}

// park puts delivery id in ep's sorted set, to be woken at at or when ep
// has room.
func (h *holder) park(ctx context.Context, ep, id string, at time.Time) error {
	return h.queue.park(ctx, ep, id, float64(at.UnixMilli()), false)
}

// park puts task id in endpoint ep's held set with score (a time in Unix
// ms; 0: at the front) and notes ep among the endpoints with held tasks.
// onlySooner (ZADD LT) leaves a task already parked for sooner as it is.
func (q *Queue) park(ctx context.Context, ep, id string, score float64, onlySooner bool) error {
	_, err := q.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		z := redis.Z{Score: score, Member: id}
		if onlySooner {
			p.ZAddLT(ctx, q.heldPrefix()+ep, z)
		} else {
			p.ZAdd(ctx, q.heldPrefix()+ep, z)
		}
		p.SAdd(ctx, q.heldPrefix()+"endpoints", ep)
		return nil
	})
	return err
}

// Start wakes held deliveries when a slot frees and every interval.
func (h *holder) Start(ctx context.Context) {
	h.start(ctx, h.interval, func(ctx context.Context) { h.pass(ctx) })
	stop := h.loop.stop
	h.done.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			case ep := <-h.gate.freed:
				h.mu.Lock()
				_, ok := h.known[ep]
				h.mu.Unlock()
				if ok { // else nothing of ep is held: no Redis call per attempt
					h.wake(ctx, ep)
				}
			}
		}
	})
}

// pass wakes what may go of every endpoint with held deliveries.
func (h *holder) pass(ctx context.Context) {
	eps, err := h.rdb.SMembers(ctx, h.endpointsKey()).Result()
	if err != nil {
		return
	}
	known := make(map[string]struct{}, len(eps))
	for _, ep := range eps {
		known[ep] = struct{}{}
	}
	h.mu.Lock()
	h.known = known
	h.mu.Unlock()
	for _, ep := range eps {
		h.wake(ctx, ep)
	}
}

// isRequestID tells a manual attempt's task id (its request id, req_...)
// from an automatic one's (its delivery id, dlv_...).
func isRequestID(id string) bool { return strings.HasPrefix(id, "req_") }

// wakeScript takes up to ARGV[2] ids of an endpoint's held set
// (KEYS[1]) whose time (ARGV[1], Unix ms) has come, and moves each one's
// asynq task from the retry set it sleeps in to the queue's pending list
// (KEYS[3]) in the same step, as asynq's RunTask does, so that no id can
// leave the set while its task stays asleep. A task still active (its
// handler parked it and has not returned yet) is looked at again at
// ARGV[5]; a pending one runs anyway. It returns the ids whose task is
// gone. KEYS[2] is the set of endpoints with held ids, ARGV[3] the
// endpoint, ARGV[4] the queue's asynq key prefix: asynq v0.26's layout,
// as Queue.RecoverOrphans follows it.
var wakeScript = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local gone = {}
for _, id in ipairs(ids) do
	redis.call('ZREM', KEYS[1], id)
	local key = ARGV[4] .. 't:' .. id
	local state = redis.call('HGET', key, 'state')
	if not state then
		table.insert(gone, id)
	elseif state == 'active' then
		redis.call('ZADD', KEYS[1], ARGV[5], id)
	elseif state == 'retry' or state == 'scheduled' then
		redis.call('ZREM', ARGV[4] .. state, id)
		redis.call('LPUSH', KEYS[3], id)
		redis.call('HSET', key, 'state', 'pending')
	end
end
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[3]) end
return gone`)

// wake moves as many of ep's held deliveries back to the queue as it has
// room for: free slots, and no more than its rate allows per interval.
func (h *holder) wake(ctx context.Context, ep string) {
	n := h.gate.free(ep)
	if r, ok := h.gate.rate(ep); ok {
		n = min(n, max(1, int(float64(r)*h.interval.Seconds())))
	}
	if n == 0 {
		return
	}
	now := h.clock.Now()
	prefix := "asynq:{" + h.queue.queue + "}:"
	gone, err := wakeScript.Run(ctx, h.rdb, []string{h.key(ep), h.endpointsKey(), prefix + "pending"},
		now.UnixMilli(), n, ep, prefix, now.Add(h.interval).UnixMilli()).StringSlice()
	if err != nil {
		return
	}
	for _, id := range gone {
		if isRequestID(id) {
			// A manual attempt's task is gone: its request is still recorded
			// in PostgreSQL, and the reconciler enqueues it from there.
			continue
		}
		// Its task is gone (Redis lost it): it is still due in PostgreSQL.
		created, err := h.queue.EnqueueCounting(ctx, webhookd.ScheduledDelivery{ID: id, EndpointID: ep, DueAt: now})
		switch {
		case err != nil:
			h.log.Debug("re-enqueue of a held delivery failed; the reconciler will", "delivery_id", id, "err", err)
		case created == 0:
			h.park(ctx, ep, id, now.Add(h.interval)) // its task is live after all: look again shortly
		}
	}
}

// held tells which of the tasks ids (delivery ids, or manual attempts'
// request ids) of the endpoints eps wait in their endpoint's held set, in
// one round trip. Such a task sleeps until the holder wakes it, as soon as
// its endpoint has room: the reconciler leaves it to the holder.
func (q *Queue) held(ctx context.Context, eps, ids []string) ([]bool, error) {
	byEndpoint := map[string][]int{}
	for i, ep := range eps {
		byEndpoint[ep] = append(byEndpoint[ep], i)
	}
	out := make([]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	scores := make(map[string]*redis.FloatSliceCmd, len(byEndpoint))
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for ep, is := range byEndpoint {
			members := make([]string, len(is))
			for j, i := range is {
				members[j] = ids[i]
			}
			scores[ep] = p.ZMScore(ctx, q.heldPrefix()+ep, members...)
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("held deliveries: %w", err)
	}
	for ep, is := range byEndpoint {
		for j, score := range scores[ep].Val() {
			out[is[j]] = score != 0 // a score is a time in Unix ms; a member not in the set reads 0
		}
	}
	return out, nil
}
