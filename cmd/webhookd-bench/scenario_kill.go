package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// killDelay is how long the kill scenario's endpoint takes to answer: long
// enough that hundreds of deliveries are in flight at once.
const killDelay = 2 * time.Second

// killScenario: `kill -9` of one of two worker processes while hundreds of
// deliveries are in flight at a slow receiver, at webhookd's default
// timeouts, so a lease would last minutes (issue 20, target 4). The API
// runs in a process of its own (`webhookd serve`) and goes on.
var killScenario = scenario{
	Name: "kill",
	Title: func(o *Options) string {
		return fmt.Sprintf("`webhookd serve` and two `webhookd worker` processes at default timeouts "+
			"(WEBHOOKD_CONNECT_TIMEOUT 10s, WEBHOOKD_RESPONSE_TIMEOUT 30s); one endpoint answering after %s gets %d "+
			"events/s, one per POST, until it holds %d requests at once; then the first worker gets SIGKILL and the "+
			"posting stops. The requests the kill cut (their connection closed unanswered) are the killed worker's "+
			"deliveries in flight; the times are from the kill until they are received again (first, half, all), "+
			"and until every event posted has been received at least once (the deliveries the killed worker had "+
			"taken from the queue but not yet sent included). The events received before the kill and again "+
			"after it are a wider count of its deliveries in flight: those cut, and those answered whose answer "+
			"it never recorded. Events lost counts those cut and never received again too",
			killDelay, o.KillRate, o.KillInFlight)
	},
	Run: runKill,
}

func runKill(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := startSplitStack(ctx, o, seq, 2)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	const name = "kill"
	if _, err := s.createEndpoints(ctx, []endpoint{{name: name, behaviour: slow, eventType: "bench.kill"}}); err != nil {
		return result{}, err
	}
	s.recv.SetDelay(name, killDelay)
	s.recv.RecordRepeats(name)
	l := &ledger{}
	stop := make(chan struct{})
	p := poster{api: s.api, ledger: l, targets: []string{name}, stop: stop,
		make: func(i int) eventIn { return eventIn{Type: "bench.kill", Data: map[string]int{"n": i}} }}
	var stopOnce sync.Once
	stopPosting := func() { stopOnce.Do(func() { close(stop) }) }
	defer stopPosting()
	posted := make(chan error, 1)
	go func() {
		_, err := p.Paced(ctx, o.KillRate, 10*time.Minute)
		posted <- err
	}()
	atKill, err := waitInFlight(ctx, s.recv, name, o.KillInFlight, time.Minute, posted)
	if err != nil {
		return result{}, err
	}
	victim := s.extra[0]
	queued := l.Expected() - s.recv.Distinct([]string{name}) // accepted, not yet received: roughly the queue
	killAt := time.Now()
	victim.Kill()
	progress("  killed worker pid %d at %s UTC, %d requests at the receiver", victim.cmd.Process.Pid,
		killAt.UTC().Format("15:04:05.000"), atKill)
	stopPosting()
	if err := <-posted; err != nil {
		return result{}, err
	}
	// The kernel closes the killed worker's connections at once; give the
	// receiver's handlers a moment to see it.
	select {
	case <-ctx.Done():
		return result{}, ctx.Err()
	case <-time.After(500 * time.Millisecond):
	}
	cut := s.recv.CutSince(name, killAt)
	again, missing, err := waitReceivedAgain(ctx, s.recv, name, cut, killAt, o.StallTimeout, o.MaxWait)
	if err != nil {
		return result{}, err
	}
	back := nan
	if missing == 0 && len(again) > 0 {
		back = again[len(again)-1]
	}
	if err := waitDelivered(ctx, s.recv, []string{name}, l.Expected(), o.StallTimeout, o.MaxWait); err != nil {
		return result{}, err
	}
	redone := s.recv.Redelivered(name, killAt)
	st := l.Stats(s.recv)
	st.Lost += missing // received once, cut by the kill, and never again
	everything := nan
	if st.Lost == 0 && st.LastReceipt.After(killAt) {
		everything = st.LastReceipt.Sub(killAt).Seconds()
	}
	common, err := s.common(st, info)
	if err != nil {
		return result{}, err
	}
	figs := []figure{
		{Name: "requests at the receiver at the kill", Unit: count, Value: float64(atKill), Target: info},
		{Name: "events accepted and not yet received at the kill", Unit: count, Value: float64(max(queued, 0)), Target: info},
		{Name: "deliveries in flight at the killed worker", Unit: count, Value: float64(len(cut)),
			Target: target{Text: "≥ 200", Met: func(v, _ float64) bool { return v >= 200 }}, Up: true},
		{Name: "kill → first of them received again", Unit: seconds, Value: percentile(again, 0), Target: info},
		{Name: "kill → half of them received again", Unit: seconds, Value: percentile(again, 0.5), Target: info},
		{Name: "kill → all of them received again", Unit: seconds, Value: back, Target: atMost(10, seconds)},
		{Name: "of them never received again", Unit: count, Value: float64(missing), Target: none()},
		{Name: "events received before the kill and again after it", Unit: count, Value: float64(len(redone)), Target: info},
		{Name: "kill → all of those received again", Unit: seconds, Value: percentile(redone, 1), Target: info},
		{Name: "kill → every event received", Unit: seconds, Value: everything, Target: info},
	}
	return result{Figures: append(figs, common...)}, nil
}

// waitInFlight waits until endpoint name holds want requests at once and
// returns how many it held then. It fails after wait, or if the posting
// ends first.
func waitInFlight(ctx context.Context, r *receiver, name string, want int, wait time.Duration, posted <-chan error) (int, error) {
	deadline := time.After(wait)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if n := r.InFlight(name); n >= want {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-posted:
			return 0, fmt.Errorf("posting ended before %d requests were in flight: %v", want, err)
		case <-deadline:
			return 0, fmt.Errorf("%d requests in flight at most, not %d, after %s", r.MaxInFlight(name), want, wait)
		case <-tick.C:
		}
	}
}

// waitReceivedAgain waits until the event of each cut request has reached
// endpoint name again after its cut, the endpoint has received nothing at
// all for stall, or max has passed. (None of them may come for seconds, by
// design: a dead worker's leases are void only after a while; the rest of
// the load is what shows webhookd still moving.) It returns the seconds
// from t to each that came, sorted, and how many never came.
func waitReceivedAgain(ctx context.Context, r *receiver, name string, cut []cutRequest, t time.Time,
	stall, max time.Duration) ([]float64, int, error) {
	deadline := time.Now().Add(max)
	lastN, lastChange := -1, time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var came []float64
		for _, c := range cut {
			if at, ok := r.ReceivedAfter(name, c.eventID, c.at); ok {
				came = append(came, at.Sub(t).Seconds())
			}
		}
		if n := r.Receipts(name); n != lastN {
			lastN, lastChange = n, time.Now()
		}
		if len(came) == len(cut) || time.Since(lastChange) > stall || time.Now().After(deadline) {
			slices.Sort(came)
			return came, len(cut) - len(came), nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-tick.C:
		}
	}
}
