package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// chaosOptions is the command line of `webhookd-bench chaos`, the chaos
// soak: every fault at once on a running system, then a ledger of what
// became of every event.
type chaosOptions struct {
	Webhookd      string        // -webhookd; bin/webhookd
	Seed          uint64        // -seed; 0: drawn from the clock (and printed)
	Duration      time.Duration // -duration; 3m of load and faults
	Rate          int           // -rate; 20 events a second
	Senders       int           // -senders; 4
	FaultGap      time.Duration // -fault-gap; 6s between faults on average
	Grace         time.Duration // -grace; 10s after a fault still counted as its outage
	DrainBound    time.Duration // -drain-bound; 3m for the backlog to drain after the last fault
	RetrySchedule string        // -retry-schedule; 1s,2s,5s,10s
	LivenessBound time.Duration // -liveness-bound; 5s a delivery may wait past its time, outside faults
	Faults        string        // -faults; every kind (a drill names a few, comma-separated)
	LogLevel      string        // -log-level; warn (debug shows each worker's attempts and passes)
	Out           string        // -out; - (stdout), e.g. RELIABILITY.md
}

func (o *chaosOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.Webhookd, "webhookd", "bin/webhookd", "the webhookd binary to run")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the fault schedule and the load (0: drawn from the clock; printed either way)")
	fs.DurationVar(&o.Duration, "duration", 3*time.Minute, "how long the load and the faults go on")
	fs.IntVar(&o.Rate, "rate", 20, "events a second, over all senders")
	fs.IntVar(&o.Senders, "senders", 4, "concurrent senders")
	fs.DurationVar(&o.FaultGap, "fault-gap", 6*time.Second, "time between fault starts on average (faults overlap)")
	fs.DurationVar(&o.Grace, "grace", 10*time.Second, "how long after a fault ends an answer still counts as during its outage")
	fs.DurationVar(&o.DrainBound, "drain-bound", 3*time.Minute, "the longest the backlog may take to drain after the last fault")
	fs.StringVar(&o.RetrySchedule, "retry-schedule", "1s,2s,5s,10s", "WEBHOOKD_RETRY_SCHEDULE of the soak")
	fs.DurationVar(&o.LivenessBound, "liveness-bound", 5*time.Second,
		"the longest a delivery may wait past its next_attempt_at (and a probe past its probe_at), time under a fault on a worker, PostgreSQL or Redis not counted")
	fs.StringVar(&o.Faults, "faults", "", "only these kinds of fault, comma-separated (a drill); empty: every kind ("+
		strings.Join(faultKinds, ", ")+", heartbeat-stall)")
	fs.StringVar(&o.LogLevel, "log-level", "warn", "WEBHOOKD_LOG_LEVEL of every webhookd process (debug, info, warn, error)")
	fs.StringVar(&o.Out, "out", "-", `report file ("-": stdout)`)
}

func (o *chaosOptions) Validate() error {
	switch {
	case o.Duration < 20*time.Second:
		return errors.New("-duration must be at least 20s")
	case o.Rate < 1 || o.Senders < 1:
		return errors.New("-rate and -senders must be at least 1")
	case o.FaultGap < time.Second || o.Grace < 0 || o.DrainBound <= 0:
		return errors.New("-fault-gap must be at least 1s, -grace not negative, -drain-bound positive")
	case o.LivenessBound < time.Second:
		return errors.New("-liveness-bound must be at least 1s (PostgreSQL is sampled every second)")
	case !slices.Contains([]string{"debug", "info", "warn", "error"}, o.LogLevel):
		return fmt.Errorf("-log-level: %q is none of debug, info, warn, error", o.LogLevel)
	}
	for _, k := range o.faultKinds() {
		if !slices.Contains(faultKinds, k) && k != "heartbeat-stall" {
			return fmt.Errorf("-faults: no fault kind %q (kinds: %s, heartbeat-stall)", k, strings.Join(faultKinds, ", "))
		}
	}
	return nil
}

// seededOptions are a subcommand's flags (chaos, history).
type seededOptions interface {
	bind(fs *flag.FlagSet)
	Validate() error
}

// parseSeeded parses subcommand name's flags into o and checks them
// (false: bad flags, said on stderr), and picks *seed when -seed was not
// given, saying how to repeat the run.
func parseSeeded(name string, o seededOptions, seed *uint64, args []string) bool {
	fs := flag.NewFlagSet("webhookd-bench "+name, flag.ContinueOnError)
	o.bind(fs)
	if err := fs.Parse(args); err != nil {
		return false
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "webhookd-bench %s: %v\n", name, err)
		return false
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano()) % 1_000_000_000
	}
	progress("%s: seed %d (repeat with -seed %d)", name, *seed, *seed)
	return true
}

// runChaos is `webhookd-bench chaos [flags]`. Exit status: 0 when the
// ledger holds, 1 when it does not or the soak could not run, 2 on bad
// flags, 130 when interrupted.
func runChaos(args []string) int {
	o := &chaosOptions{}
	if !parseSeeded("chaos", o, &o.Seed, args) {
		return 2
	}
	if _, err := os.Stat(o.Webhookd); err != nil {
		fmt.Fprintf(os.Stderr, "webhookd-bench chaos: %v (build it with `make build`)\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak(ctx, o)
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "webhookd-bench chaos: interrupted; nothing written")
		return 130
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhookd-bench chaos:", err)
		return 1
	}
	if err := writeChaosReport(rep, o.Out); err != nil {
		fmt.Fprintln(os.Stderr, "webhookd-bench chaos:", err)
		return 1
	}
	if len(rep.Failures) > 0 {
		fmt.Fprintf(os.Stderr, "webhookd-bench chaos: the ledger does not hold (seed %d): %s\n",
			o.Seed, strings.Join(rep.Failures, "; "))
		return 1
	}
	return 0
}

// soak runs the whole thing: system, load and faults, the end of the
// faults, the repeat of every send that never got through, the drain, and
// the ledger.
func soak(ctx context.Context, o *chaosOptions) (*chaosReport, error) {
	sys, err := startChaosSystem(ctx, o)
	if err != nil {
		return nil, err
	}
	defer sys.Close()
	if err := sys.createEndpoints(ctx); err != nil {
		return nil, err
	}
	load, err := newChaosLoad(sys)
	if err != nil {
		return nil, err
	}
	var procNames, proxyNames []string
	for _, p := range sys.procs {
		procNames = append(procNames, p.Name)
		proxyNames = append(proxyNames, p.Name+"/postgres", p.Name+"/redis")
	}
	plan := planFaults(o.Seed, o.Duration, o.FaultGap, o.faultKinds(), procNames, proxyNames)
	progress("chaos: %d faults planned over %s:", len(plan), o.Duration)
	for _, f := range plan {
		progress("chaos:   %s", f)
	}
	runner := &faultRunner{sys: sys}
	stopSampling := sys.sampleRSS(2 * time.Second)
	live := newLivenessSampler(sys.db.URL, o.LivenessBound, time.Second)
	live.Start(ctx)
	start := time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, o.Duration)
	defer stopLoad()
	done := make(chan struct{})
	go func() { load.Run(loadCtx, o.Seed, o.Rate, o.Senders); close(done) }()
	runner.Run(loadCtx, start, plan)
	<-done
	faultsOver := time.Now()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	progress("chaos: load and faults over after %s; repeating the sends that never got through", faultsOver.Sub(start).Round(time.Second))
	for _, p := range sys.procs {
		if err := p.Alive(); err != nil {
			progress("chaos: %s is not running after the faults (%v); starting it", p.Name, err)
			if err := p.Start(ctx); err != nil {
				return nil, err
			}
		}
	}
	resolveCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	resolved := load.Resolve(resolveCtx)
	cancel()
	progress("chaos: %d sends and %d bulk requests got through on repeat; waiting for the backlog to drain", resolved, load.bulkResolved)
	drained, err := sys.waitDrained(ctx, faultsOver.Add(o.DrainBound))
	if err != nil {
		return nil, err
	}
	stopSampling()
	live.Stop()
	progress("chaos: backlog %s; checking the ledger", map[bool]string{true: "drained", false: "NOT drained"}[drained])
	rep, err := buildChaosReport(ctx, o, sys, load, live, runner.Records(), plan, start, faultsOver, resolved)
	if err == nil && len(rep.Failures) > 0 {
		sys.keep = true // the processes' logs, for the request ids the report names
	}
	return rep, err
}

// createEndpoints adds the soak's endpoints to the receiver and the API.
func (s *chaosSystem) createEndpoints(ctx context.Context) error {
	api := newAPIClient("http://"+s.Serves()[0].APIAddr, s.key)
	s.endpointNames, s.endpointIDs = make(map[string]string), make(map[string]string)
	for _, e := range chaosEndpoints {
		url := s.recv.Add(e.name, e.behaviour)
		types := e.types
		if types == nil {
			types = []string{}
		}
		id, supported, err := api.CreateEndpoint(ctx, endpointIn{URL: url, EventTypes: types, Ordering: e.ordering})
		if err != nil {
			return err
		}
		if !supported {
			return fmt.Errorf("endpoint %s: webhookd refused its ordering %q", e.name, e.ordering)
		}
		s.endpointNames[id] = e.name
		s.endpointIDs[e.name] = id
	}
	return nil
}

// sampleRSS reads every process's resident set every interval until the
// returned stop is called.
func (s *chaosSystem) sampleRSS(interval time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			for _, p := range s.procs {
				p.SampleRSS()
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// faultKinds is -faults as a list; nil for every kind.
func (o *chaosOptions) faultKinds() []string {
	if o.Faults == "" {
		return nil
	}
	return strings.Split(o.Faults, ",")
}
