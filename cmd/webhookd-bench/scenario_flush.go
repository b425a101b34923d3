package main

import (
	"context"
	"fmt"
	"time"
)

// flushAcceptSlack is how long after the flush an event's 202 may arrive
// and the event still count as due at the flush: the API answers after it
// has enqueued, so an event whose task the flush took may be answered a
// moment after it.
const flushAcceptSlack = 250 * time.Millisecond

// flushScenario: Redis loses everything (FLUSHDB) while events are posted
// to an instant endpoint (issue 20, target 5): webhookd must notice the
// loss and rebuild its queue from PostgreSQL within seconds.
var flushScenario = scenario{
	Name: "flush",
	Title: func(o *Options) string {
		return fmt.Sprintf("one instant endpoint gets %d events/s, one per POST, for %s; halfway, Redis gets FLUSHDB. "+
			"Due at the flush: events accepted before it (or up to %s after: their tasks may have been enqueued "+
			"before it) and not received by then; the time is from the flush until the last of them is received",
			o.FlushRate, o.FlushDuration, flushAcceptSlack)
	},
	Run: runFlush,
}

func runFlush(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := startStack(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	const name = "flush"
	if _, err := s.createEndpoints(ctx, []endpoint{{name: name, behaviour: instant, eventType: "bench.flush"}}); err != nil {
		return result{}, err
	}
	l := &ledger{}
	p := poster{api: s.api, ledger: l, targets: []string{name},
		make: func(i int) eventIn { return eventIn{Type: "bench.flush", Data: map[string]int{"n": i}} }}
	posted := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := p.Paced(ctx, o.FlushRate, o.FlushDuration)
		posted <- err
	}()
	var flushAt time.Time
	select {
	case <-ctx.Done():
		return result{}, ctx.Err()
	case err := <-posted:
		return result{}, fmt.Errorf("posting ended before the flush: %v", err)
	case <-time.After(time.Until(start.Add(o.FlushDuration / 2))):
		flushAt = time.Now()
		if err := s.redis.Client.FlushDB(ctx).Err(); err != nil {
			return result{}, fmt.Errorf("FLUSHDB: %w", err)
		}
	}
	if err := <-posted; err != nil {
		return result{}, err
	}
	if err := waitDelivered(ctx, s.recv, []string{name}, l.Expected(), o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	due, last := l.DueAt(s.recv, flushAt, flushAcceptSlack)
	recovered := nan
	if due > 0 && !last.IsZero() {
		recovered = last.Sub(flushAt).Seconds()
	}
	st := l.Stats(s.recv)
	if due > 0 && st.Lost > 0 {
		recovered = nan // some never came: no time to give
	}
	common, err := s.common(st, info)
	if err != nil {
		return result{}, err
	}
	figs := []figure{
		{Name: "deliveries due at the flush", Unit: count, Value: float64(due), Target: info},
		{Name: "flush → all of them received", Unit: seconds, Value: recovered, Target: atMost(5, seconds)},
		{Name: "latency p50 (accepted → received)", Unit: milliseconds, Value: percentile(st.Latencies, 0.50), Target: info},
		{Name: "latency p99 (accepted → received)", Unit: milliseconds, Value: percentile(st.Latencies, 0.99), Target: info},
		{Name: "latency max (accepted → received)", Unit: milliseconds, Value: percentile(st.Latencies, 1), Target: info},
	}
	return result{Figures: append(figs, common...)}, nil
}
