package dispatcher

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// holdFor is how long a delivery held back for room at its endpoint sleeps
// unless a freed slot wakes it sooner: a last resort, long, so that a
// backlog held back for hours is not run every few minutes just to be held
// back again.
const holdFor = storage.HoldFor

// holder keeps deliveries that their endpoint cannot take yet (at its
// in-flight cap, or over its rate_limit_per_second) out of everyone's way.
// PostgreSQL holds the wait: the delivery's waiting_reason (endpoint_busy,
// rate_limit) and its next_attempt_at, holdFor ahead; its task sleeps in
// asynq until then, which costs nothing while it waits. When the endpoint
// has room again (a slot freed in this process, or the periodic pass finds
// one), PostgreSQL picks the longest-waiting deliveries of the endpoint,
// makes them due now, and their tasks run at once (Queue.Wake). Nothing is
// polled per held delivery, so a backlog of B held deliveries costs
// nothing per second.
//
// Which endpoints to look at is a cache of this process (known), which its
// heartbeat carries (holding): lost with the process, the reconciler wakes
// the held deliveries of endpoints that no live worker holds
// (Reconciler.wakeStranded).
type holder struct {
	db       *storage.DB
	queue    *Queue
	gate     *gate
	clock    webhookd.Clock
	log      *slog.Logger
	interval time.Duration
	held     *prometheus.CounterVec // by waiting reason
	holds    *batcher[storage.Hold, bool]

	mu sync.Mutex
	// known are the endpoints whose deliveries this process held back
	// lately, each with a count of its holds: a pass forgets an endpoint
	// only if no hold came between its look and its wake.
	known map[string]uint64

	loop
}

func newHolder(db *storage.DB, q *Queue, g *gate, clock webhookd.Clock, log *slog.Logger, held *prometheus.CounterVec) *holder {
	return &holder{db: db, held: held, queue: q, gate: g, clock: clock, log: log, interval: 100 * time.Millisecond,
		known: map[string]uint64{}}
}

// hold holds back the automatic attempt of delivery id of endpoint ep for
// reason, and returns what its task's handler
// returns: a retry far off, or soon if the hold could not be recorded.
func (h *holder) hold(ctx context.Context, ep, id, reason string) error {
	until := h.clock.Now().Add(holdFor)
	if _, err := h.holds.Do(context.WithoutCancel(ctx), storage.Hold{DeliveryID: id, Reason: reason, Until: &until}); err != nil {
		return &RetryAt{At: h.clock.Now().Add(time.Second), Reason: reason}
	}
	h.remember(ep)
	h.held.WithLabelValues(reason).Inc()
	return &RetryAt{At: until, Reason: "held back: " + reason}
}

// remember notes that ep may have held deliveries, so a slot freed there
// wakes them.
func (h *holder) remember(ep string) {
	h.mu.Lock()
	h.known[ep]++
	h.mu.Unlock()
}

// holding marks in loads (a heartbeat's) the endpoints this process may
// have held deliveries of, which it wakes as their slots free: the
// reconciler wakes those of endpoints no live worker holds
// (Reconciler.wakeStranded).
func (h *holder) holding(loads map[string]storage.EndpointLoad) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ep := range h.known {
		l := loads[ep]
		l.Holding = 1
		loads[ep] = l
	}
}

// Start wakes held deliveries when a slot frees and every interval.
func (h *holder) Start(ctx context.Context) {
	h.start(ctx, h.interval, h.pass)
	stop := h.loop.stop
	h.done.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			case ep := <-h.gate.freed:
				for ep := range h.freedSoon(ep) {
					h.wake(ctx, ep)
				}
			}
		}
	})
}

// freedSoon returns the endpoints with held deliveries among first and
// those whose slots freed while the wake before ran (waiting in
// gate.freed): one wake (one statement) per endpoint for every slot that
// freed meanwhile, not one per slot. It does not linger for more: a held
// delivery's way back (the wake's statement, its task run and claimed) is
// time its freed slot stands empty, and each millisecond of it is lost
// throughput at an endpoint whose limit its capacity holds (capacity: 366
// deliveries/s with a 5 ms linger, 381/s with 1 ms, 395/s with none, of
// 500/s). Endpoints nothing of which is held here cost no database work.
func (h *holder) freedSoon(first string) map[string]struct{} {
	h.mu.Lock()
	none := len(h.known) == 0
	h.mu.Unlock()
	if none {
		return nil
	}
	eps := map[string]struct{}{first: {}}
	for gather := true; gather; {
		select {
		case ep := <-h.gate.freed:
			eps[ep] = struct{}{}
		default:
			gather = false
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ep := range eps {
		if _, ok := h.known[ep]; !ok {
			delete(eps, ep)
		}
	}
	return eps
}

// pass wakes what may go of every endpoint this process held deliveries
// of, and forgets those with none left.
func (h *holder) pass(ctx context.Context) {
	h.mu.Lock()
	eps := maps.Clone(h.known)
	h.mu.Unlock()
	for ep, holds := range eps {
		n := h.room(ep)
		if n == 0 {
			continue
		}
		// Fewer waited than it had room for: none left, unless a hold
		// committed after the wake's look (it counted one more). A wake
		// that failed (-1) forgets nothing.
		if woke := h.wake(ctx, ep); woke >= 0 && woke < n {
			h.mu.Lock()
			if h.known[ep] == holds {
				delete(h.known, ep)
			}
			h.mu.Unlock()
		}
	}
}

// room is how many of ep's held deliveries may go now: its free slots
// and those about to free (gate.wakeable), and no more than its rate
// allows per interval.
func (h *holder) room(ep string) int {
	n := h.gate.wakeable(ep)
	if r := h.gate.rate(ep); r > 0 {
		n = min(n, max(1, int(float64(r)*h.interval.Seconds())))
	}
	return n
}

// wake makes as many of ep's held deliveries due as it has room for,
// chosen by PostgreSQL, wakes their tasks, and tells how many it woke: -1
// when PostgreSQL could not be asked.
func (h *holder) wake(ctx context.Context, ep string) int {
	n := h.room(ep)
	if n == 0 {
		return 0
	}
	ids, err := h.db.WakeWaiting(ctx, ep, n, h.clock.Now())
	if err != nil {
		h.log.Debug("waking held deliveries failed; the next freed slot or pass will", "endpoint_id", ep, "err", err)
		return -1
	}
	h.gate.woke(ep, len(ids))
	h.queue.Wake(ctx, ep, ids...)
	return len(ids)
}
