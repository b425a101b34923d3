package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestBaselineOption(t *testing.T) {
	parse := func(args ...string) *Options {
		t.Helper()
		o := &Options{}
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.bind(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		return o
	}
	if o := parse(); o.Baseline != "" {
		t.Errorf("-baseline defaults to %q, want none", o.Baseline)
	}
	o := parse("-webhookd", "bin/new", "-baseline", "bin/old", "-runs", "2")
	b := o.forBaseline()
	if o.Baseline != "bin/old" || b.Webhookd != "bin/old" || o.Webhookd != "bin/new" || b.Runs != 2 {
		t.Errorf("-baseline bin/old: options %q/%q, for the baseline %q runs %d", o.Webhookd, o.Baseline, b.Webhookd, b.Runs)
	}
}

func TestSidesAlternate(t *testing.T) {
	o := &Options{Webhookd: "new", Baseline: "old"}
	s := &scenarioReport{Role: "candidate", Baseline: &scenarioReport{Role: "baseline"}}
	order := func(run int) string {
		var out []string
		for _, side := range s.sides(o, run) {
			out = append(out, side.s.Role+"="+side.o.Webhookd)
		}
		return strings.Join(out, ",")
	}
	for run, want := range map[int]string{1: "baseline=old,candidate=new", 2: "candidate=new,baseline=old",
		3: "baseline=old,candidate=new"} {
		if got := order(run); got != want {
			t.Errorf("run %d measures %s, want %s", run, got, want)
		}
	}
	alone := &scenarioReport{}
	if got := alone.sides(o, 1); len(got) != 1 || got[0].s != alone || got[0].o != o {
		t.Errorf("without a baseline, sides = %+v", got)
	}
}

func TestVersus(t *testing.T) {
	for _, tt := range []struct {
		c, b         float64
		up           bool
		text, within string
	}{
		{2800, 3000, true, "0.933×", "yes"},
		{2600, 3000, true, "0.867×", "no"}, // a rate 13% lower
		{3600, 3000, true, "1.200×", "yes"},
		{12, 10, false, "1.200×", "no"}, // a latency 20% higher
		{10.5, 10, false, "1.050×", "yes"},
		{5, 10, false, "0.500×", "yes"},
		{0, 0, false, "1.000×", "yes"},
		{2, 0, false, "∞", "no"}, // duplicates where there were none
		{2, 0, true, "∞", "yes"},
		{nan, 10, false, "n/a", "n/a"},
		{10, nan, true, "n/a", "n/a"},
	} {
		if text, within := versus(tt.c, tt.b, tt.up); text != tt.text || within != tt.within {
			t.Errorf("versus(%v, %v, up %v) = %s, %s; want %s, %s", tt.c, tt.b, tt.up, text, within, tt.text, tt.within)
		}
	}
}

// testReport is an ingest report of two runs, with a baseline when base is
// given.
func testReport(base []result) *report {
	o := &Options{Runs: 2, CeilingTasks: 1000}
	title := func(*Options) string { return "single POSTs" }
	res := func(posts, p99 float64) result {
		return result{Figures: []figure{
			{Name: "POSTs/s", Unit: perSecond, Value: posts, Target: atLeast(3000, perSecond), Throughput: true},
			{Name: "request p99", Unit: milliseconds, Value: p99, Target: below(25, milliseconds)},
			{Name: "events lost", Unit: count, Value: 0, Target: none()},
		}}
	}
	s := &scenarioReport{Scenario: scenario{Name: "ingest", Title: title},
		Results: []result{res(3100, 12), res(3300, 14)}}
	if base != nil {
		o.Baseline = "bin/webhookd-base"
		s.Role = "candidate"
		s.Baseline = &scenarioReport{Scenario: s.Scenario, Role: "baseline", Results: base,
			Errors: []string{"run 3: boom"}}
	}
	return &report{Options: o, Ceilings: []float64{7000, 7200}, Scenarios: []*scenarioReport{s},
		Env: environment{Candidate: "`bin/webhookd`: revision not recorded, go1.26.8",
			Baseline: "`bin/webhookd-base`: revision fc972c5, go1.26.8"}}
}

func TestReportWithoutBaseline(t *testing.T) {
	var b strings.Builder
	rep := testReport(nil)
	if err := rep.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| figure | median | runs | target | met | vs asynq ceiling |\n",
		"| POSTs/s | 3,200/s | 3,100/s; 3,300/s | ≥ 3,000/s | yes | 0.45× |\n",
		"Every target is met.\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "baseline") || rep.Regressions() != nil {
		t.Errorf("a report without -baseline mentions one:\n%s", out)
	}
}

func TestReportWithBaseline(t *testing.T) {
	base := func(posts, p99 float64) result {
		return result{Figures: []figure{
			{Name: "POSTs/s", Unit: perSecond, Value: posts, Target: atLeast(3000, perSecond), Throughput: true},
			{Name: "request p99", Unit: milliseconds, Value: p99, Target: below(25, milliseconds)},
			{Name: "events lost", Unit: count, Value: 0, Target: none()},
		}}
	}
	rep := testReport([]result{base(3300, 9), base(3500, 11)}) // medians 3,400/s and 10 ms
	var b strings.Builder
	if err := rep.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| baseline | `bin/webhookd-base`: revision fc972c5, go1.26.8 |\n",
		"| figure | candidate | runs | baseline | runs | candidate / baseline | within 10% | target | met |\n",
		"| POSTs/s | 3,200/s | 3,100/s; 3,300/s | 3,400/s | 3,300/s; 3,500/s | 0.941× | yes | ≥ 3,000/s | yes |\n",
		"| request p99 | 13 ms | 12 ms; 14 ms | 10 ms | 9.00 ms; 11 ms | 1.300× | **no** | < 25 ms | yes |\n",
		"| events lost | 0 | 0; 0 | 0 | 0; 0 | 1.000× | yes | 0 | yes |\n",
		"Worse than the baseline by more than 10% (higher is better for rates, lower for everything else): " +
			"ingest: request p99 (1.300×).\n",
		"Failed (baseline): run 3: boom\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if got := rep.Regressions(); len(got) != 1 || got[0] != "ingest: request p99 (1.300×)" {
		t.Errorf("Regressions() = %q", got)
	}
	if rep.failures() != 1 {
		t.Errorf("failures() = %d, want the baseline's 1", rep.failures())
	}
}

func TestPairsKeepFiguresOfEitherSide(t *testing.T) {
	f := func(name string, v float64) result {
		return result{Figures: []figure{{Name: name, Unit: count, Value: v, Target: info}}}
	}
	s := &scenarioReport{Results: []result{f("a", 1)}, Baseline: &scenarioReport{Results: []result{f("b", 2)}}}
	got := s.pairs()
	if len(got) != 2 || got[0].Cand.Name != "a" || got[0].Base.Values != nil || got[1].Base.Name != "b" ||
		got[1].Cand.Values != nil {
		t.Fatalf("pairs = %+v", got)
	}
	if text, _ := got[0].versus(); text != "n/a" {
		t.Errorf("a figure the baseline lacks compares as %s, want n/a", text)
	}
}
