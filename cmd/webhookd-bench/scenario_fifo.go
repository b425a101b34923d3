package main

import (
	"context"
	"fmt"
	"time"
)

// fifoDelay is how long the ordered endpoint takes to answer.
const fifoDelay = 10 * time.Millisecond

// fifoScenario: one ordered endpoint (ordering fifo) answering in 10 ms;
// its deliveries go one at a time, so its throughput is one attempt's
// whole round: claim, request, record, and the turn passed on (issue 24:
// at least 50/s).
var fifoScenario = scenario{
	Name: "fifo",
	Title: func(o *Options) string {
		return fmt.Sprintf("one ordered endpoint (ordering fifo) on type bench.fifo answering after %s; %s events "+
			"in batches of 10 by one client; throughput from the first POST to the last receipt, and the most "+
			"requests the endpoint held at once (1: one at a time)", fifoDelay, thousands(float64(o.FIFOEvents)))
	},
	Run: runFIFO,
}

func runFIFO(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := startStack(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	const name = "fifo"
	note, err := s.createEndpoints(ctx, []endpoint{{name: name, behaviour: slow, eventType: "bench.fifo", ordering: "fifo"}})
	if err != nil {
		return result{}, err
	}
	s.recv.SetDelay(name, fifoDelay)
	l := &ledger{}
	p := poster{api: s.api, ledger: l, targets: []string{name},
		make: func(i int) eventIn { return eventIn{Type: "bench.fifo", Data: map[string]int{"n": i}} }}
	if err := p.Batches(ctx, o.FIFOEvents, 10, 1); err != nil {
		return result{}, err
	}
	if err := waitDelivered(ctx, s.recv, []string{name}, l.Expected(), o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	st := l.Stats(s.recv)
	common, err := s.common(st, none())
	if err != nil {
		return result{}, err
	}
	figs := append(throughputFigures(st, atLeast(50, perSecond)),
		figure{Name: "requests in flight at once (max)", Unit: count, Value: float64(s.recv.MaxInFlight(name)), Target: atMost(1, count)})
	res := result{Figures: append(figs, common...)}
	if note != "" {
		res.Notes = append(res.Notes, note)
	}
	return res, nil
}
