package main

import (
	"context"
	"fmt"
)

// oneSlowScenario: one endpoint answering in 200 ms, a backlog of events in
// batches, webhookd's defaults (no max_in_flight sent): the common case of a
// platform's biggest customer with an ordinary receiver. A fixed cap of 10
// in flight would allow 50 deliveries/s; the adaptive limit must find the
// receiver's room (issue 20, target 1).
var oneSlowScenario = scenario{
	Name: "one-slow",
	Title: func(o *Options) string {
		return fmt.Sprintf("one endpoint on type bench.one-slow answering after %s, created without max_in_flight; "+
			"%s events in batches of %d by 4 clients; throughput from the first POST to the last receipt, and the "+
			"most requests the endpoint held at once", slowDelay, thousands(float64(o.OneSlowEvents)), slowBatch)
	},
	Run: runOneSlow,
}

// oneSlowName is the one endpoint's name in both one-slow scenarios.
const oneSlowName = "one-slow"

// startOneSlow starts webhookd with the one endpoint answering after
// slowDelay, and a poster of events to it.
func startOneSlow(ctx context.Context, o *Options, seq int) (*stack, poster, error) {
	s, err := startStack(ctx, o, seq)
	if err != nil {
		return nil, poster{}, err
	}
	if _, err := s.createEndpoints(ctx, []endpoint{{name: oneSlowName, behaviour: slow, eventType: "bench.one-slow"}}); err != nil {
		s.Close()
		return nil, poster{}, err
	}
	return s, poster{api: s.api, ledger: &ledger{}, targets: []string{oneSlowName},
		make: func(i int) eventIn { return eventIn{Type: "bench.one-slow", Data: map[string]int{"n": i}} }}, nil
}

func runOneSlow(ctx context.Context, o *Options, seq int) (result, error) {
	s, p, err := startOneSlow(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	name, l := oneSlowName, p.ledger
	sampler := sampleInFlight(s.recv, name)
	if err := p.Batches(ctx, o.OneSlowEvents, slowBatch, 4); err != nil {
		sampler.Stop()
		return result{}, err
	}
	err = waitDelivered(ctx, s.recv, []string{name}, l.Expected(), o.StallTimeout, o.MaxWait)
	secs := sampler.Stop()
	if err != nil {
		return result{}, err
	}
	st := l.Stats(s.recv)
	common, err := s.common(st, none())
	if err != nil {
		return result{}, err
	}
	figs := append(throughputFigures(st, atLeast(1000, perSecond)),
		figure{Name: "requests in flight at once (max)", Unit: count, Value: float64(s.recv.MaxInFlight(name)), Target: info},
		// The latencies of a backlog are the drain's time less the
		// posting's: a faster API with the same delivery rate shows them longer.
		figure{Name: "posting (first POST → last 202)", Unit: seconds, Value: st.LastAccepted.Sub(st.First).Seconds(), Target: info})
	return result{Figures: append(figs, common...), Notes: []string{"in flight at the endpoint, " + inFlightTable(secs)}}, nil
}

// oneSlowSingleScenario: the same endpoint, events one per POST from the
// ingest clients, as a peer's comparison posts them (issue 38: "2,000
// single POSTs to ONE endpoint answering in 200 ms"): how soon the
// adaptive limit finds the room a healthy endpoint has, seen as latency.
var oneSlowSingleScenario = scenario{
	Name: "one-slow-single",
	Title: func(o *Options) string {
		return fmt.Sprintf("one endpoint on type bench.one-slow answering after %s, created without max_in_flight; "+
			"%s events, one per POST with an Idempotency-Key, from %d clients as fast as the API answers; latency "+
			"from each 202 to its receipt, throughput from the first POST to the last receipt", slowDelay,
			thousands(float64(o.OneSlowSingles)), o.IngestClients)
	},
	Run: runOneSlowSingle,
}

func runOneSlowSingle(ctx context.Context, o *Options, seq int) (result, error) {
	s, p, err := startOneSlow(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	name := oneSlowName
	sampler := sampleInFlight(s.recv, name)
	_, took, err := postSingles(ctx, p, o.OneSlowSingles, o.IngestClients)
	if err != nil {
		sampler.Stop()
		return result{}, err
	}
	err = waitDelivered(ctx, s.recv, p.targets, p.ledger.Expected(), o.StallTimeout, o.MaxWait)
	secs := sampler.Stop()
	if err != nil {
		return result{}, err
	}
	if err := writeTrace(o, "one-slow-single", seq, p.ledger, s.recv); err != nil {
		return result{}, err
	}
	st := p.ledger.Stats(s.recv)
	common, err := s.common(st, none())
	if err != nil {
		return result{}, err
	}
	figs := throughputFigures(st, info)
	figs[1].Target, figs[2].Target = below(250, milliseconds), below(500, milliseconds) // issue 38
	figs = append(figs,
		figure{Name: "request p99", Unit: milliseconds, Value: percentile(took, 0.99), Target: info},
		figure{Name: "requests in flight at once (max)", Unit: count, Value: float64(s.recv.MaxInFlight(name)), Target: info})
	return result{Figures: append(figs, common...), Notes: []string{"in flight at the endpoint, " + inFlightTable(secs)}}, nil
}
