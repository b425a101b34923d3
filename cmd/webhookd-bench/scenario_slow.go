package main

import (
	"context"
	"fmt"
)

// slowBatch is the batch size of the slow scenario's posts.
const slowBatch = 100

// slowScenario: many endpoints that each take 200 ms, all subscribed to one
// type, so every event fans out to all of them. It measures whether slow
// receivers in flight are bounded by worker slots rather than by
// PostgreSQL connections, and that the API keeps accepting meanwhile.
var slowScenario = scenario{
	Name: "slow",
	Title: func(o *Options) string {
		events := slowEvents(o)
		return fmt.Sprintf("%d endpoints on type bench.slow, each answering after %s; %s events in batches of %d "+
			"(%s deliveries); throughput from the first POST to the last receipt",
			o.SlowEndpoints, slowDelay, thousands(float64(events)), slowBatch, thousands(float64(events*o.SlowEndpoints)))
	},
	Run: runSlow,
}

// slowEvents is how many events make about -slow-deliveries deliveries.
func slowEvents(o *Options) int {
	return max(1, (o.SlowDeliveries+o.SlowEndpoints/2)/o.SlowEndpoints)
}

func runSlow(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := startStack(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	var eps []endpoint
	var names []string
	for i := range o.SlowEndpoints {
		name := fmt.Sprintf("slow-%d", i)
		eps = append(eps, endpoint{name: name, behaviour: slow, eventType: "bench.slow"})
		names = append(names, name)
	}
	if _, err := s.createEndpoints(ctx, eps); err != nil {
		return result{}, err
	}
	l := &ledger{}
	p := poster{api: s.api, ledger: l, targets: names,
		make: func(i int) eventIn { return eventIn{Type: "bench.slow", Data: map[string]int{"n": i}} }}
	if err := p.Batches(ctx, slowEvents(o), slowBatch, 4); err != nil {
		return result{}, err
	}
	if err := waitDelivered(ctx, s.recv, names, l.Expected(), o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	st := l.Stats(s.recv)
	common, err := s.common(st, none())
	if err != nil {
		return result{}, err
	}
	return result{Figures: append(throughputFigures(st, atLeast(1000, perSecond)), common...)}, nil
}
