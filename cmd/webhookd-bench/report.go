package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// report is everything measured, ready to be written as BENCHMARKS.md.
type report struct {
	Env       environment
	Options   *Options
	Ceilings  []float64 // tasks/s, one per repetition (NaN when it failed)
	Scenarios []*scenarioReport
}

// scenarioReport is one scenario's repetitions on one binary.
type scenarioReport struct {
	Scenario scenario
	Role     string   // with -baseline, "candidate" or "baseline"; "" without
	Results  []result // the repetitions that finished
	Errors   []string // the ones that did not

	Baseline *scenarioReport // with -baseline, the same scenario on the baseline binary
}

// row is one figure over all repetitions.
type row struct {
	figure           // as in the first repetition, Value = median
	Values []float64 // one per finished repetition
}

// rows gathers each figure's values over the repetitions, in the order of
// the first one.
func (s *scenarioReport) rows() []row {
	var out []row
	for _, res := range s.Results {
		for _, f := range res.Figures {
			i := slices.IndexFunc(out, func(r row) bool { return r.Name == f.Name })
			if i < 0 {
				out = append(out, row{figure: f})
				i = len(out) - 1
			}
			out[i].Values = append(out[i].Values, f.Value)
		}
	}
	for i := range out {
		out[i].Value = median(out[i].Values)
	}
	return out
}

// pair is one figure on the candidate and on the baseline; a side where it
// was never measured has no values and a NaN median.
type pair struct {
	Cand, Base row
}

// pairs matches the candidate's rows with the baseline's by name, in the
// candidate's order, then any the baseline alone has.
func (s *scenarioReport) pairs() []pair {
	var out []pair
	base := s.Baseline.rows()
	for _, c := range s.rows() {
		p := pair{Cand: c, Base: row{figure: c.figure}}
		p.Base.Value = nan
		if i := slices.IndexFunc(base, func(b row) bool { return b.Name == c.Name }); i >= 0 {
			p.Base = base[i]
		}
		out = append(out, p)
	}
	for _, b := range base {
		if !slices.ContainsFunc(out, func(p pair) bool { return p.Cand.Name == b.Name }) {
			p := pair{Cand: row{figure: b.figure}, Base: b}
			p.Cand.Value = nan
			out = append(out, p)
		}
	}
	return out
}

// versus is the pair's ratio and whether the candidate is within tolerance.
func (p pair) versus() (text, within string) {
	return versus(p.Cand.Value, p.Base.Value, p.Cand.higherIsBetter())
}

// notes are the repetitions' notes, each once.
func (s *scenarioReport) notes() []string {
	var out []string
	for _, res := range s.Results {
		for _, n := range res.Notes {
			if n != "" && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// Ceiling is the median asynq no-op ceiling.
func (r *report) Ceiling() float64 { return median(r.Ceilings) }

// Missed lists "scenario: figure" for every target missed (or not
// measurable) by its median.
func (r *report) Missed() []string {
	var out []string
	for _, s := range r.Scenarios {
		for _, row := range s.rows() {
			if m := row.Target.met(row.Value, r.Ceiling()); m == "no" || m == "n/a" {
				out = append(out, s.Scenario.Name+": "+row.Name)
			}
		}
	}
	return out
}

// Regressions lists "scenario: figure (ratio)" for every figure whose
// candidate median is worse than the baseline's by more than tolerance;
// none without -baseline.
func (r *report) Regressions() []string {
	var out []string
	for _, s := range r.Scenarios {
		if s.Baseline == nil {
			continue
		}
		for _, p := range s.pairs() {
			if text, within := p.versus(); within == "no" {
				out = append(out, fmt.Sprintf("%s: %s (%s)", s.Scenario.Name, p.Cand.Name, text))
			}
		}
	}
	return out
}

// Write renders the report as Markdown.
func (r *report) Write(w io.Writer) error {
	var b strings.Builder
	r.writeHeader(&b)
	for _, s := range r.Scenarios {
		r.writeScenario(&b, s)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *report) writeHeader(b *strings.Builder) {
	b.WriteString("# webhookd benchmarks\n\n")
	b.WriteString("End-to-end figures of the real `webhookd all` binary, measured by `cmd/webhookd-bench` over " +
		"loopback only: each scenario run gets a fresh PostgreSQL database, its own throwaway `redis-server` " +
		"and a new webhookd process; the tool posts events through the public API and receives the deliveries " +
		"itself. Latency is from the arrival of the API's 202 to the first receipt at the endpoint. " +
		"The tool, webhookd, PostgreSQL and Redis share the machine's CPUs.\n\n")
	fmt.Fprintf(b, "| | |\n|---|---|\n")
	fmt.Fprintf(b, "| date (UTC) | %s |\n", r.Env.Date.Format("2006-01-02 15:04:05"))
	fmt.Fprintf(b, "| commit | %s |\n", r.Env.Commit)
	fmt.Fprintf(b, "| machine | %s |\n", r.Env.Machine)
	fmt.Fprintf(b, "| Go | %s |\n", r.Env.Go)
	fmt.Fprintf(b, "| PostgreSQL | %s |\n", r.Env.Postgres)
	fmt.Fprintf(b, "| Redis | %s |\n", r.Env.Redis)
	fmt.Fprintf(b, "| command | `%s` |\n", r.Env.Command)
	if r.Options.Baseline == "" {
		fmt.Fprintf(b, "| repetitions | %d of each scenario; the median is the figure, each run's value is beside it |\n",
			r.Options.Runs)
	} else {
		fmt.Fprintf(b, "| candidate | %s |\n", r.Env.Candidate)
		fmt.Fprintf(b, "| baseline | %s |\n", r.Env.Baseline)
		fmt.Fprintf(b, "| repetitions | %d of each scenario on each binary, alternately in the same session: "+
			"each run of a scenario measures both, one right after the other, the baseline first in odd runs and "+
			"the candidate first in even ones; each median is the figure, each run's value is beside it, and "+
			"the ratio is candidate / baseline |\n", r.Options.Runs)
	}
	fmt.Fprintf(b, "| asynq no-op ceiling | %s (runs: %s): asynq %s alone, %s tasks with TaskIDs enqueued one by one, "+
		"then run by a server with concurrency %d and a handler that does nothing; measured before each repetition |\n",
		format(r.Ceiling(), perSecond), values(r.Ceilings, perSecond), r.Env.Asynq, thousands(float64(r.Options.CeilingTasks)),
		ceilingConcurrency)
	if r.Options.WorkerConcurrency > 0 {
		fmt.Fprintf(b, "| WEBHOOKD_WORKER_CONCURRENCY | %d |\n", r.Options.WorkerConcurrency)
	}
	if len(r.Options.Env) > 0 || len(r.Options.BaselineEnv) > 0 {
		fmt.Fprintf(b, "| settings | candidate: `%s`; baseline: `%s` |\n", r.Options.Env.String(), r.Options.BaselineEnv.String())
	}
	b.WriteString("\nHow to reproduce: `make bench` (the Go benchmarks, then this tool with `-runs 3 -out BENCHMARKS.md`); " +
		"`make bench-smoke` runs a small version and prints it.\n\n")
	if r.Options.Baseline != "" {
		b.WriteString("A/B: `make bench-baseline REV=<revision>` builds `bin/webhookd-base` from a revision; " +
			"`make bench BASELINE=bin/webhookd-base` measures it alternately with `bin/webhookd`.\n\n")
	}
	missed := r.Missed()
	if len(missed) == 0 {
		b.WriteString("Every target is met.\n")
	} else {
		fmt.Fprintf(b, "Targets missed or not measurable: %s.\n", strings.Join(missed, "; "))
	}
	if r.Options.Baseline == "" {
		return
	}
	if worse := r.Regressions(); len(worse) == 0 {
		fmt.Fprintf(b, "\nEvery figure is within %s of the baseline's (higher is better for rates, lower for "+
			"everything else).\n", tolerancePercent())
	} else {
		fmt.Fprintf(b, "\nWorse than the baseline by more than %s (higher is better for rates, lower for everything "+
			"else): %s.\n", tolerancePercent(), strings.Join(worse, "; "))
	}
}

func (r *report) writeScenario(b *strings.Builder, s *scenarioReport) {
	fmt.Fprintf(b, "\n## %s\n\n%s.\n\n", s.Scenario.Name, s.Scenario.Title(r.Options))
	if s.Baseline != nil {
		r.writeComparison(b, s)
		return
	}
	b.WriteString("| figure | median | runs | target | met | vs asynq ceiling |\n|---|---|---|---|---|---|\n")
	for _, row := range s.rows() {
		vs := ""
		if row.Throughput {
			vs = ratio(row.Value, r.Ceiling())
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", row.Name, format(row.Value, row.Unit),
			values(row.Values, row.Unit), row.Target.Text, row.Target.met(row.Value, r.Ceiling()), vs)
	}
	for _, n := range s.notes() {
		fmt.Fprintf(b, "\nNote: %s\n", n)
	}
	for _, e := range s.Errors {
		fmt.Fprintf(b, "\nFailed: %s\n", oneLine(e))
	}
}

// writeComparison is writeScenario's table with -baseline: each figure's
// median and runs on both binaries, their ratio, and the candidate's target.
func (r *report) writeComparison(b *strings.Builder, s *scenarioReport) {
	fmt.Fprintf(b, "| figure | candidate | runs | baseline | runs | candidate / baseline | within %s | target | met |\n"+
		"|---|---|---|---|---|---|---|---|---|\n", tolerancePercent())
	for _, p := range s.pairs() {
		text, within := p.versus()
		if within == "no" {
			within = "**no**"
		}
		c, base := p.Cand, p.Base
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Name,
			format(c.Value, c.Unit), values(c.Values, c.Unit), format(base.Value, base.Unit), values(base.Values, base.Unit),
			text, within, c.Target.Text, c.Target.met(c.Value, r.Ceiling()))
	}
	for _, n := range s.notes() {
		fmt.Fprintf(b, "\nNote: %s\n", n)
	}
	for _, n := range s.Baseline.notes() {
		if !slices.Contains(s.notes(), n) {
			fmt.Fprintf(b, "\nNote (baseline): %s\n", n)
		}
	}
	for _, e := range s.Errors {
		fmt.Fprintf(b, "\nFailed (candidate): %s\n", oneLine(e))
	}
	for _, e := range s.Baseline.Errors {
		fmt.Fprintf(b, "\nFailed (baseline): %s\n", oneLine(e))
	}
}

// values writes each value, separated by semicolons (the values have commas).
func values(vs []float64, u unit) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = format(v, u)
	}
	if len(out) == 0 {
		return "—"
	}
	return strings.Join(out, "; ")
}

// oneLine keeps a multi-line error in a Markdown paragraph.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 2000 {
		s = s[:2000] + "…"
	}
	return s
}
