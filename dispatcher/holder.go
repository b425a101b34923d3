package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
)

// holdFor is how long a held-back task sleeps in asynq's retry set unless
// the holder wakes it sooner. It only matters if every wake-up was missed
// (a worker killed between the two): then the task comes back on its own.
const holdFor = 5 * time.Minute

// Why a delivery is held back (the label of webhookd_deliveries_held_back_total).
const (
	holdInFlightCap = "in_flight_cap" // its endpoint has its cap of requests in flight
	holdRateLimit   = "rate_limit"    // its endpoint's rate_limit_per_second
)

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
// there), and its asynq task is live, so the reconciler leaves it alone;
// if Redis is lost, the reconciler enqueues it again.
type holder struct {
	rdb       redis.UniversalClient
	inspector *asynq.Inspector
	queue     *Queue
	gate      *gate
	prefix    string // of the sorted sets; prefix + "endpoints" lists the endpoints with held deliveries
	clock     webhookd.Clock
	log       *slog.Logger
	interval  time.Duration
	held      *prometheus.CounterVec // by reason

	mu    sync.Mutex
	known map[string]struct{} // endpoints that may have held deliveries: parked here, or seen in the last pass

	loop
}

func newHolder(rdb redis.UniversalClient, q *Queue, g *gate, clock webhookd.Clock, log *slog.Logger,
	held *prometheus.CounterVec) *holder {
	return &holder{rdb: rdb, held: held, inspector: asynq.NewInspectorFromRedisClient(rdb), queue: q, gate: g,
		prefix: "webhookd:{" + q.queue + "}:held:", clock: clock, log: log, interval: 100 * time.Millisecond,
		known: map[string]struct{}{}}
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
	h.mu.Lock()
	h.known[ep] = struct{}{}
	h.mu.Unlock()
	h.held.WithLabelValues(reason).Inc()
	return &RetryAt{At: h.clock.Now().Add(holdFor), Reason: "held back: " + reason}
}

// park puts delivery id in ep's sorted set, to be woken at at or when ep
// has room.
func (h *holder) park(ctx context.Context, ep, id string, at time.Time) error {
	_, err := h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, h.key(ep), redis.Z{Score: float64(at.UnixMilli()), Member: id})
		p.SAdd(ctx, h.endpointsKey(), ep)
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

var wakeScript = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[3]) end
return ids`)

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
	ids, err := wakeScript.Run(ctx, h.rdb, []string{h.key(ep), h.endpointsKey()},
		now.UnixMilli(), n, ep).StringSlice()
	if err != nil {
		return
	}
	relook := func(id string) { h.park(ctx, ep, id, now.Add(h.interval)) } // look again shortly
	for _, id := range ids {
		err := h.inspector.RunTask(h.queue.queue, id)
		if errors.Is(err, asynq.ErrQueueNotFound) {
			// A Redis that lost its data lost asynq's list of queues too,
			// and no client adds ours again: until one does, asynq
			// answers "no such queue" for every task in it.
			if h.queue.Register(ctx) == nil {
				err = h.inspector.RunTask(h.queue.queue, id)
			}
		}
		switch {
		case err == nil:
		case isRequestID(id) && (errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound)):
			// A manual attempt's task is gone: its request is still recorded
			// in PostgreSQL, and the reconciler enqueues it from there.
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			// Its task is gone (Redis lost it): it is still due in PostgreSQL.
			created, err := h.queue.EnqueueCounting(ctx, webhookd.ScheduledDelivery{ID: id, EndpointID: ep, DueAt: now})
			switch {
			case err != nil:
				h.log.Debug("re-enqueue of a held delivery failed; the reconciler will", "delivery_id", id, "err", err)
			case created == 0:
				relook(id) // its task is live after all: dropping it here would leave it asleep for holdFor
			}
		default:
			// Still active (its handler has not returned yet) or pending.
			relook(id)
		}
	}
}
