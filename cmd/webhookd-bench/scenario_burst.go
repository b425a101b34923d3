package main

import (
	"context"
	"fmt"
	"math"
)

// burstEndpoints is how many instant endpoints every burst event goes to.
const burstEndpoints = 4

// burstScenario: a burst of batches to four instant endpoints, as fast as
// the API takes them; throughput from the first POST to the last receipt.
var burstScenario = scenario{
	Name: "burst",
	Title: func(o *Options) string {
		return fmt.Sprintf("%d instant endpoints on type bench.burst; %s events in batches of %d by %d concurrent clients "+
			"as fast as possible (%s deliveries); throughput from the first POST to the last receipt",
			burstEndpoints, thousands(float64(o.BurstEvents)), o.BurstBatch, o.BurstClients,
			thousands(float64(o.BurstEvents*burstEndpoints)))
	},
	Run: runBurst,
}

func runBurst(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := startStack(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	var eps []endpoint
	var names []string
	for i := range burstEndpoints {
		name := fmt.Sprintf("burst-%d", i)
		eps = append(eps, endpoint{name: name, behaviour: instant, eventType: "bench.burst", maxInFlight: o.MaxInFlight})
		names = append(names, name)
	}
	note, err := s.createEndpoints(ctx, eps)
	if err != nil {
		return result{}, err
	}
	l := &ledger{}
	p := poster{api: s.api, ledger: l, targets: names,
		make: func(i int) eventIn { return eventIn{Type: "bench.burst", Data: map[string]int{"n": i}} }}
	if err := p.Batches(ctx, o.BurstEvents, o.BurstBatch, o.BurstClients); err != nil {
		return result{}, err
	}
	if err := waitDelivered(ctx, s.recv, names, l.Expected(), o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	st := l.Stats(s.recv)
	common, err := s.common(st, info)
	if err != nil {
		return result{}, err
	}
	figs := append(throughputFigures(st, burstTarget()), common...)
	return result{Figures: figs, Notes: []string{note}}, nil
}

// burstTarget is ≥ 3,000 deliveries/s and ≥ 0.35 × the asynq ceiling.
func burstTarget() target {
	return target{Text: "≥ 3,000/s and ≥ 0.35× ceiling", Met: func(v, ceiling float64) bool {
		return v >= 3000 && !math.IsNaN(ceiling) && v >= 0.35*ceiling
	}}
}

// throughputFigures is deliveries/s (wanted as t) and the latency
// percentiles of a throughput scenario.
func throughputFigures(st deliveryStats, t target) []figure {
	return []figure{
		{Name: "deliveries/s", Unit: perSecond, Value: st.Rate(), Target: t, Throughput: true},
		{Name: "latency p50 (accepted → received)", Unit: milliseconds, Value: percentile(st.Latencies, 0.50), Target: info},
		{Name: "latency p99 (accepted → received)", Unit: milliseconds, Value: percentile(st.Latencies, 0.99), Target: info},
	}
}
