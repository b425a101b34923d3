package main

import (
	"context"
	"fmt"
	"time"
)

// noisyScenario: a hanging endpoint with a backlog must not slow down a
// healthy one (SPEC §1, "one endpoint cannot starve the others").
var noisyScenario = scenario{
	Name: "noisy",
	Title: func(o *Options) string {
		return fmt.Sprintf("endpoint A hangs (WEBHOOKD_RESPONSE_TIMEOUT=30s) and first gets %s events of type bench.hang "+
			"in batches of 100; while they are stuck, instant endpoint B gets %d events/s of type bench.healthy, "+
			"one per POST, for %s; B's latency from accepted to received (events lost counts B's only: "+
			"A's cannot all arrive in time by design)",
			thousands(float64(o.NoisyHangEvents)), o.NoisyRate, o.NoisyDuration)
	},
	Run: runNoisy,
}

func runNoisy(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := startStack(ctx, o, seq, "WEBHOOKD_RESPONSE_TIMEOUT=30s")
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	_, err = s.createEndpoints(ctx, []endpoint{
		{name: "hang", behaviour: hang, eventType: "bench.hang"},
		{name: "healthy", behaviour: instant, eventType: "bench.healthy"},
	})
	if err != nil {
		return result{}, err
	}
	stuck := poster{api: s.api, ledger: &ledger{}, targets: []string{"hang"},
		make: func(i int) eventIn { return eventIn{Type: "bench.hang", Data: map[string]int{"n": i}} }}
	if err := stuck.Batches(ctx, o.NoisyHangEvents, 100, 4); err != nil {
		return result{}, err
	}
	if err := waitDelivered(ctx, s.recv, []string{"hang"}, 1, 30*time.Second, 30*time.Second); err != nil {
		return result{}, err
	}
	healthy := &ledger{}
	p := poster{api: s.api, ledger: healthy, targets: []string{"healthy"},
		make: func(i int) eventIn { return eventIn{Type: "bench.healthy", Data: map[string]int{"n": i}} }}
	offered, err := p.Paced(ctx, o.NoisyRate, o.NoisyDuration)
	if err != nil {
		return result{}, err
	}
	if err := waitDelivered(ctx, s.recv, []string{"healthy"}, healthy.Expected(), o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	st := healthy.Stats(s.recv)
	common, err := s.common(st, info)
	if err != nil {
		return result{}, err
	}
	figs := []figure{
		{Name: "B latency p50", Unit: milliseconds, Value: percentile(st.Latencies, 0.50), Target: info},
		{Name: "B latency p99", Unit: milliseconds, Value: percentile(st.Latencies, 0.99), Target: below(1000, milliseconds)},
		{Name: "B events accepted/s", Unit: perSecond, Value: offered, Target: info},
		{Name: "A requests held at once (max)", Unit: count, Value: float64(s.recv.MaxInFlight("hang")), Target: atMost(10, count)},
	}
	return result{Figures: append(figs, common...)}, nil
}
