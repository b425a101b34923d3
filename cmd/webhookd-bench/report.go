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

// scenarioReport is one scenario's repetitions.
type scenarioReport struct {
	Scenario scenario
	Results  []result // the repetitions that finished
	Errors   []string // the ones that did not
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
	fmt.Fprintf(b, "| repetitions | %d of each scenario; the median is the figure, each run's value is beside it |\n",
		r.Options.Runs)
	fmt.Fprintf(b, "| asynq no-op ceiling | %s (runs: %s): asynq %s alone, %s tasks with TaskIDs enqueued one by one, "+
		"then run by a server with concurrency %d and a handler that does nothing; measured before each repetition |\n",
		format(r.Ceiling(), perSecond), values(r.Ceilings, perSecond), r.Env.Asynq, thousands(float64(r.Options.CeilingTasks)),
		ceilingConcurrency)
	if r.Options.WorkerConcurrency > 0 {
		fmt.Fprintf(b, "| WEBHOOKD_WORKER_CONCURRENCY | %d |\n", r.Options.WorkerConcurrency)
	}
	b.WriteString("\nHow to reproduce: `make bench` (the Go benchmarks, then this tool with `-runs 3 -out BENCHMARKS.md`); " +
		"`make bench-smoke` runs a small version and prints it.\n\n")
	missed := r.Missed()
	if len(missed) == 0 {
		b.WriteString("Every target is met.\n")
	} else {
		fmt.Fprintf(b, "Targets missed or not measurable: %s.\n", strings.Join(missed, "; "))
	}
}

func (r *report) writeScenario(b *strings.Builder, s *scenarioReport) {
	fmt.Fprintf(b, "\n## %s\n\n%s.\n\n", s.Scenario.Name, s.Scenario.Title(r.Options))
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
