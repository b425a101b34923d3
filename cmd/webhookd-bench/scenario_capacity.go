package main

import (
	"context"
	"fmt"
	"strings"
)

// capacityRetrySchedule brings a delivery refused for overload back within
// a second, often enough that none is dead-lettered for it if webhookd
// backs off as it should.
var capacityRetrySchedule = strings.TrimSuffix(strings.Repeat("1s,", 10), ",")

// capacityScenario: a receiver with a real capacity, which serves
// capacityLimit requests at once and refuses the rest with 503 (issue 20,
// target 2): the adaptive limit must find that capacity and stay near it.
var capacityScenario = scenario{
	Name: "capacity",
	Title: func(o *Options) string {
		return capacityTitle(o, fmt.Sprintf("serves %d requests at once, each in %s, and answers 503 at once to any more",
			capacityLimit, capacityDelay))
	},
	Run: func(ctx context.Context, o *Options, seq int) (result, error) {
		return runCapacity(ctx, o, seq, capacity)
	},
}

// capacityLatencyScenario: the same capacity, but above it the receiver
// slows down instead of refusing: latency is the only signal.
var capacityLatencyScenario = scenario{
	Name: "capacity-latency",
	Title: func(o *Options) string {
		return capacityTitle(o, fmt.Sprintf("refuses nothing but answers in %s × max(1, in flight / %d)",
			capacityDelay, capacityLimit))
	},
	Run: func(ctx context.Context, o *Options, seq int) (result, error) {
		return runCapacity(ctx, o, seq, congested)
	},
}

func capacityTitle(o *Options, how string) string {
	return fmt.Sprintf("one endpoint, created without max_in_flight, that %s: a capacity of %s requests/s; %s events "+
		"in batches of %d by 4 clients, WEBHOOKD_RETRY_SCHEDULE=%s; throughput from the first POST to the last "+
		"receipt as a share of that capacity, attempts refused for overload as a share of all attempts, and "+
		"dead letters (webhookd_dead_letters_total); the note gives the most requests in flight at the endpoint "+
		"each second (sampled every %s), the adaptive limit as the receiver sees it",
		how, thousands(capacityRate), thousands(float64(o.CapacityEvents)), slowBatch, capacityRetrySchedule, sampleEvery)
}

func runCapacity(ctx context.Context, o *Options, seq int, b behaviour) (result, error) {
	s, err := startStack(ctx, o, seq, "WEBHOOKD_RETRY_SCHEDULE="+capacityRetrySchedule)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	const name = "capacity"
	if _, err := s.createEndpoints(ctx, []endpoint{{name: name, behaviour: b, eventType: "bench.capacity"}}); err != nil {
		return result{}, err
	}
	l := &ledger{}
	p := poster{api: s.api, ledger: l, targets: []string{name},
		make: func(i int) eventIn { return eventIn{Type: "bench.capacity", Data: map[string]int{"n": i}} }}
	sampler := sampleInFlight(s.recv, name)
	if err := p.Batches(ctx, o.CapacityEvents, slowBatch, 4); err != nil {
		sampler.Stop()
		return result{}, err
	}
	err = waitDelivered(ctx, s.recv, []string{name}, l.Expected(), o.StallTimeout, o.MaxWait)
	secs := sampler.Stop()
	if err != nil {
		return result{}, err
	}
	// A refused request is no receipt: the last receipts are 204s, so the
	// rate is of deliveries served.
	st := l.Stats(s.recv)
	requests, refused := s.recv.Requests(name)
	dead, err := scrapeSum(ctx, s.client, deadLetterMetric, s.proc.DashboardURL+"/metrics")
	if err != nil {
		return result{}, err
	}
	common, err := s.common(st, none())
	if err != nil {
		return result{}, err
	}
	share := nan
	if requests > 0 {
		share = 100 * float64(refused) / float64(requests)
	}
	figs := []figure{
		{Name: "deliveries/s", Unit: perSecond, Value: st.Rate(), Target: info},
		{Name: "throughput, % of capacity", Unit: percent, Value: 100 * st.Rate() / capacityRate,
			Target: target{Text: "≥ 80%", Met: func(v, _ float64) bool { return v >= 80 }}, Up: true},
		{Name: "attempts refused for overload", Unit: percent, Value: share, Target: atMost(2, percent)},
		{Name: "attempts", Unit: count, Value: float64(requests), Target: info},
		{Name: "deliveries dead-lettered", Unit: count, Value: dead, Target: none()},
		{Name: "requests in flight at once (max)", Unit: count, Value: float64(s.recv.MaxInFlight(name)), Target: info},
		{Name: "latency p50 (accepted → received)", Unit: milliseconds, Value: percentile(st.Latencies, 0.50), Target: info},
		{Name: "latency p99 (accepted → received)", Unit: milliseconds, Value: percentile(st.Latencies, 0.99), Target: info},
	}
	note := fmt.Sprintf("in flight at the endpoint (capacity %d), %s", capacityLimit, inFlightTable(secs))
	return result{Figures: append(figs, common...), Notes: []string{note}}, nil
}
