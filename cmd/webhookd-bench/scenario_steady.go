package main

import (
	"context"
	"fmt"
)

// steadyScenario: an even load well below capacity, one event per POST;
// the latency a receiver sees when webhookd is not behind.
var steadyScenario = scenario{
	Name: "steady",
	Title: func(o *Options) string {
		return fmt.Sprintf("one instant endpoint on type bench.steady; %d events/s, one per POST, paced by a ticker "+
			"from a pool of clients, for %s after %s of the same load not measured (a process just started opens its "+
			"connections and PostgreSQL its caches); latency from accepted to received", o.SteadyRate, o.SteadyDuration, o.SteadyWarmup)
	},
	Run: runSteady,
}

func runSteady(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := startStack(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	note, err := s.createEndpoints(ctx, []endpoint{
		{name: "steady", behaviour: instant, eventType: "bench.steady", maxInFlight: o.MaxInFlight},
		{name: "warmup", behaviour: instant, eventType: "bench.warmup", maxInFlight: o.MaxInFlight}})
	if err != nil {
		return result{}, err
	}
	if o.SteadyWarmup > 0 { // the same load to an endpoint of its own, so the measured one sees only measured events
		w := poster{api: s.api, ledger: &ledger{}, targets: []string{"warmup"},
			make: func(i int) eventIn { return eventIn{Type: "bench.warmup", Data: map[string]int{"n": i}} }}
		if _, err := w.Paced(ctx, o.SteadyRate, o.SteadyWarmup); err != nil {
			return result{}, err
		}
		if err := waitDelivered(ctx, s.recv, w.targets, w.ledger.Expected(), o.StallTimeout, o.MaxWait); err != nil {
			return result{}, err
		}
	}
	mark, err := markStore(ctx, s.db.URL)
	if err != nil {
		return result{}, err
	}
	l := &ledger{}
	p := poster{api: s.api, ledger: l, targets: []string{"steady"},
		make: func(i int) eventIn { return eventIn{Type: "bench.steady", Data: map[string]int{"n": i}} }}
	offered, err := p.Paced(ctx, o.SteadyRate, o.SteadyDuration)
	if err != nil {
		return result{}, err
	}
	if err := waitDelivered(ctx, s.recv, []string{"steady"}, l.Expected(), o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	st := l.Stats(s.recv)
	common, err := s.common(st, info)
	if err != nil {
		return result{}, err
	}
	figs := []figure{
		{Name: "latency p50", Unit: milliseconds, Value: percentile(st.Latencies, 0.50), Target: info},
		{Name: "latency p99", Unit: milliseconds, Value: percentile(st.Latencies, 0.99), Target: below(50, milliseconds)},
		{Name: "events accepted/s", Unit: perSecond, Value: offered, Target: info},
	}
	cost, err := storeCost(ctx, s.db.URL, mark, l.Expected())
	if err != nil {
		return result{}, err
	}
	figs = append(figs, cost...)
	return result{Figures: append(figs, common...), Notes: []string{note}}, nil
}
