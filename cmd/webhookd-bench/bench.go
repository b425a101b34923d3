package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"time"
)

// runBench measures the asynq ceiling and then every selected scenario,
// Runs times over. A failed measurement is recorded in the report and the
// rest go on; only the end of ctx stops it early.
//
// With -baseline each scenario run is two, one on each binary, one right
// after the other: the baseline first in odd runs, the candidate first in
// even ones, so that neither always has the machine as the other left it.
func runBench(ctx context.Context, o *Options) (*report, error) {
	env, err := describeEnvironment(ctx, o)
	if err != nil {
		return nil, err
	}
	rep := &report{Env: env, Options: o}
	for _, name := range o.selected() {
		s := &scenarioReport{Scenario: scenarios[name]}
		if o.Baseline != "" {
			s.Role = "candidate"
			s.Baseline = &scenarioReport{Scenario: s.Scenario, Role: "baseline"}
		}
		rep.Scenarios = append(rep.Scenarios, s)
	}
	seq := 0
	for run := 1; run <= o.Runs; run++ {
		if err := rep.measureCeiling(ctx, run); err != nil {
			return rep, err
		}
		for _, s := range rep.Scenarios {
			for _, side := range s.sides(o, run) {
				seq++
				if err := side.s.runOnce(ctx, side.o, run, seq); err != nil {
					return rep, err
				}
			}
		}
	}
	return rep, nil
}

// side is one binary's record of a scenario and the options that measure it.
type side struct {
	s *scenarioReport
	o *Options
}

// sides is what one run of the scenario measures, in order: the candidate
// alone, or with -baseline both, the baseline first when run is odd.
func (s *scenarioReport) sides(o *Options, run int) []side {
	cand := side{s, o}
	if s.Baseline == nil {
		return []side{cand}
	}
	base := side{s.Baseline, o.forBaseline()}
	if run%2 == 1 {
		return []side{base, cand}
	}
	return []side{cand, base}
}

// measureCeiling adds one ceiling measurement; only ctx's end is returned.
func (r *report) measureCeiling(ctx context.Context, run int) error {
	progress("run %d/%d: asynq no-op ceiling, %s tasks", run, r.Options.Runs, thousands(float64(r.Options.CeilingTasks)))
	rate, version, err := measureCeiling(ctx, r.Options.CeilingTasks)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		progress("  failed: %v", err)
		r.Ceilings = append(r.Ceilings, math.NaN())
		return nil
	}
	r.Env.Redis = version
	r.Ceilings = append(r.Ceilings, rate)
	progress("  %s", format(rate, perSecond))
	return nil
}

// runOnce runs the scenario once and records its figures or its error;
// only ctx's end is returned.
func (s *scenarioReport) runOnce(ctx context.Context, o *Options, run, seq int) error {
	if s.Role != "" {
		progress("run %d/%d: %s, %s %s", run, o.Runs, s.Scenario.Name, s.Role, o.Webhookd)
	} else {
		progress("run %d/%d: %s", run, o.Runs, s.Scenario.Name)
	}
	start := time.Now()
	res, err := s.Scenario.Run(ctx, o, seq)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		progress("  failed after %s: %v", time.Since(start).Round(time.Second), err)
		s.Errors = append(s.Errors, fmt.Sprintf("run %d: %v", run, err))
		return nil
	}
	s.Results = append(s.Results, res)
	var parts []string
	for _, f := range res.Figures {
		parts = append(parts, f.Name+" "+format(f.Value, f.Unit))
	}
	progress("  %s (%s)", strings.Join(parts, ", "), time.Since(start).Round(100*time.Millisecond))
	for _, n := range res.Notes {
		if n != "" {
			progress("  note: %s", n)
		}
	}
	return nil
}

// failures counts the measurements that failed.
func (r *report) failures() int {
	n := 0
	for _, c := range r.Ceilings {
		if math.IsNaN(c) {
			n++
		}
	}
	for _, s := range r.Scenarios {
		n += len(s.Errors)
		if s.Baseline != nil {
			n += len(s.Baseline.Errors)
		}
	}
	return n
}

// progress writes one line of progress to stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "webhookd-bench: "+format+"\n", args...)
}
