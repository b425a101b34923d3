package main

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd/storage"
)

// overdueSample is a delivery found waiting past its time: due is when it
// should have gone at the latest (its next_attempt_at; for the head of an
// ordered queue, no sooner than the one ahead of it finished; for one
// whose lease ran out or was voided, no sooner than that), at is when it
// was seen still waiting, both by PostgreSQL's clock; event is its event's
// id.
type overdueSample struct {
	id, endpoint, reason, event string
	due, at                     time.Time
}

// livenessSampler looks at PostgreSQL every interval, directly (not through
// the proxies), for deliveries waiting more than bound past their time
// (SPEC §1: attempted within a few seconds of that time whatever was lost
// meanwhile), and at the workers' heartbeats. It keeps what it saw; the
// ledger judges it once the faults' windows are known.
type livenessSampler struct {
	dbURL    string
	bound    time.Duration
	interval time.Duration
	stop     chan struct{}
	done     chan struct{}

	mu         sync.Mutex
	heldAt     map[string]time.Time // delivery id -> last seen with a live lease or held back
	overdue    []overdueSample
	samples    int
	errors     int
	lastErr    string
	oldestBeat time.Duration // the longest a worker had not beaten, seen
}

// maxOverdueSamples bounds what the sampler keeps: a PostgreSQL restart
// makes every waiting delivery overdue for a few samples.
const maxOverdueSamples = 200_000

// livenessSQL finds the deliveries with a live lease or held back for room
// or by an open circuit (held: true), and those past bound ($1 s) without
// either. A delivery woken from a hold for room is due again at the
// instant it was first held (keepPlace keeps its place in line), so its
// wait counts from when it was last seen held, as a leased one's from when
// it was last seen leased: a wait for the endpoint's room or its probe is
// the endpoint's, not a lost wake-up. An ordered endpoint's delivery is
// looked at only at the head of its queue: those behind wait for its turn
// (fifo_turn), and the head's own time counts from when the one ahead of
// it finished. The head is never held for room: nothing but itself is
// ever in flight to its endpoint, so a hold for room (endpoint_busy) ends
// within moments; its wait counts from the instant it was held
// (storage.HoldFor, $2, before its next_attempt_at).
const livenessSQL = `
	SELECT d.id, d.endpoint_id, coalesce(d.waiting_reason, ''), coalesce(d.lease_until > now(), false)
			OR d.waiting_reason IN ('endpoint_busy', 'rate_limit', 'circuit_open') AND d.next_attempt_at > now()
				AND NOT (d.fifo_seq IS NOT NULL AND d.waiting_reason = 'endpoint_busy') AS held,
		greatest(CASE WHEN d.fifo_seq IS NOT NULL AND d.waiting_reason = 'endpoint_busy'
				THEN d.next_attempt_at - make_interval(secs => $2) ELSE d.next_attempt_at END,
			CASE WHEN d.lease_until > 'epoch' AND d.lease_until <= now() THEN d.lease_until END,
			CASE WHEN d.fifo_seq IS NOT NULL THEN (SELECT max(p.updated_at) FROM deliveries p
				WHERE p.endpoint_id = d.endpoint_id AND p.fifo_seq < d.fifo_seq
					AND p.status IN ('succeeded', 'dead_letter')) END),
		now(), d.event_id
	FROM deliveries d
	WHERE d.status IN ('pending', 'retrying')
		AND (d.lease_until > now() OR d.next_attempt_at < now() - make_interval(secs => $1)
			OR d.waiting_reason IN ('endpoint_busy', 'rate_limit', 'circuit_open') AND d.next_attempt_at > now())
		AND (d.fifo_seq IS NULL OR NOT EXISTS (SELECT 1 FROM deliveries h WHERE h.endpoint_id = d.endpoint_id
			AND h.fifo_seq < d.fifo_seq AND h.status IN ('pending', 'retrying')))`

func newLivenessSampler(dbURL string, bound, interval time.Duration) *livenessSampler {
	return &livenessSampler{dbURL: dbURL, bound: bound, interval: interval, heldAt: make(map[string]time.Time)}
}

// Start samples every interval until Stop.
func (s *livenessSampler) Start(ctx context.Context) {
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.done)
		tick := time.NewTicker(s.interval)
		defer tick.Stop()
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			case <-tick.C:
			}
			if conn == nil || conn.IsClosed() {
				c, err := pgx.Connect(ctx, s.dbURL)
				if err != nil {
					s.failed(err)
					continue
				}
				conn = c
			}
			if err := s.sample(ctx, conn); err != nil {
				s.failed(err)
				conn.Close(context.Background())
				conn = nil
			}
		}
	}()
}

// Stop ends the sampling.
func (s *livenessSampler) Stop() {
	close(s.stop)
	<-s.done
}

func (s *livenessSampler) failed(err error) {
	s.mu.Lock()
	s.errors++
	s.lastErr = err.Error()
	s.mu.Unlock()
}

func (s *livenessSampler) sample(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := conn.Query(ctx, livenessSQL, s.bound.Seconds(), storage.HoldFor.Seconds())
	if err != nil {
		return err
	}
	type row struct {
		id, ep, reason, event string
		held                  bool
		due, now              time.Time
	}
	var got []row
	var r row
	if _, err := pgx.ForEachRow(rows, []any{&r.id, &r.ep, &r.reason, &r.held, &r.due, &r.now, &r.event},
		func() error { got = append(got, r); return nil }); err != nil {
		return err
	}
	var oldest float64
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(extract(epoch FROM now() - beat_at)), 0) FROM workers`).
		Scan(&oldest); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	s.oldestBeat = max(s.oldestBeat, time.Duration(oldest*float64(time.Second)))
	for _, r := range got {
		if r.held {
			s.heldAt[r.id] = r.now
			continue
		}
		due := r.due
		if at, ok := s.heldAt[r.id]; ok && at.After(due) {
			due = at // its lease was voided or its hold woken after this: due again from then
		}
		if r.now.Sub(due) > s.bound && len(s.overdue) < maxOverdueSamples {
			s.overdue = append(s.overdue, overdueSample{id: r.id, endpoint: r.ep, reason: r.reason, event: r.event,
				due: due, at: r.now})
		}
	}
	return nil
}

// livenessVerdict is what the samples say once the faults are known.
type livenessVerdict struct {
	Bound           time.Duration
	Samples, Errors int
	LastError       string
	Overdue         int           // deliveries waiting more than Bound past their time, fault-free time counted
	Worst           time.Duration // the longest such wait
	WorstRaw        time.Duration // the longest wait past its time, faults included
	WorstWhat       string
	OldestBeat      time.Duration // the longest a worker's heartbeat was seen stale
	OverdueByReason map[string]int
	Examples        []string
}

// judge counts, for each sample, the time past due that no fault on a
// worker, PostgreSQL or Redis covered: a fault excuses the wait it causes,
// and only that. A delivery is overdue once that time passes the bound.
// accepted holds when the API first answered 2xx for each event (by event
// id): a delivery is not late before its event was accepted — a serve
// process cut off from PostgreSQL as it committed answers an error, and
// only the sender's retry, after the fault, is the acceptance (its
// wake-up was lost with the reply, and the reconciler brings it).
func (s *livenessSampler) judge(faults []faultRecord, names map[string]string, accepted map[string]time.Time) livenessVerdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := livenessVerdict{Bound: s.bound, Samples: s.samples, Errors: s.errors, LastError: s.lastErr, OldestBeat: s.oldestBeat,
		OverdueByReason: make(map[string]int)}
	windows := workerFaults(faults)
	worst := make(map[string]overdueSample)
	worstBy := make(map[string]time.Duration)
	for _, o := range s.overdue {
		if at, ok := accepted[o.event]; ok && at.After(o.due) {
			o.due = at
		}
		raw := o.at.Sub(o.due)
		v.WorstRaw = max(v.WorstRaw, raw)
		late := raw - covered(windows, o.due, o.at)
		if late > s.bound && late > worstBy[o.id] {
			worst[o.id], worstBy[o.id] = o, late
		}
	}
	for id, o := range worst {
		v.Overdue++
		reason := orNone(o.reason)
		v.OverdueByReason[reason]++
		what := names[o.endpoint]
		if what == "" {
			what = o.endpoint
		}
		if worstBy[id] > v.Worst {
			v.Worst = worstBy[id]
			v.WorstWhat = id + " to " + what + " (" + reason + ")"
		}
		if len(v.Examples) < 5 {
			v.Examples = append(v.Examples, id+" to "+what+" ("+reason+"): due "+o.due.UTC().Format("15:04:05.0")+
				", still waiting at "+o.at.UTC().Format("15:04:05.0")+", "+worstBy[id].Round(100*time.Millisecond).String()+
				" past it outside faults")
		}
	}
	return v
}

// workerFaults are the windows of the faults that can hold a delivery
// back: on a worker process or its proxies, and PostgreSQL's or Redis's
// restarts. A serve process's fault delays new events, not due ones.
func workerFaults(faults []faultRecord) [][2]time.Time {
	var out [][2]time.Time
	for _, f := range faults {
		hit := strings.HasPrefix(f.Kind, "postgres-restart") || strings.HasPrefix(f.Kind, "redis-")
		for _, t := range f.Targets {
			hit = hit || strings.HasPrefix(t, "worker-")
		}
		if hit {
			out = append(out, [2]time.Time{f.Start, f.End})
		}
	}
	return out
}

// covered is how much of [from, to] the windows cover (overlaps counted
// once).
func covered(windows [][2]time.Time, from, to time.Time) time.Duration {
	var total time.Duration
	at := from
	for at.Before(to) {
		// The window covering at that reaches furthest, or the next to start.
		var end, next time.Time
		for _, w := range windows {
			switch {
			case !w[0].After(at) && w[1].After(at):
				if w[1].After(end) {
					end = w[1]
				}
			case w[0].After(at) && w[0].Before(to) && (next.IsZero() || w[0].Before(next)):
				next = w[0]
			}
		}
		switch {
		case !end.IsZero():
			end = minTime(end, to)
			total += end.Sub(at)
			at = end
		case !next.IsZero():
			at = next
		default:
			return total
		}
	}
	return total
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
