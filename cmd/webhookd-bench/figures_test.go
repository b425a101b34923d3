package main

import (
	"math"
	"testing"
)

func TestParseHistogram(t *testing.T) {
	page := `# HELP webhookd_reconciler_pass_seconds Duration of a reconciler pass.
# TYPE webhookd_reconciler_pass_seconds histogram
webhookd_reconciler_pass_seconds_bucket{le="0.005"} 1
webhookd_reconciler_pass_seconds_sum 0.75
webhookd_reconciler_pass_seconds_count 3
webhookd_reconciler_pass_seconds_total_other 99
webhookd_other_sum 5
`
	tests := []struct {
		name, page, metric string
		want               histogram
		ok                 bool
	}{
		{"plain", page, reconcilerMetric, histogram{sum: 0.75, count: 3}, true},
		{"labels add up", "x_seconds_sum{a=\"1\"} 1\nx_seconds_sum{a=\"2\"} 2\nx_seconds_count{a=\"1\"} 4\n",
			"x_seconds", histogram{sum: 3, count: 4}, true},
		{"absent", "webhookd_other_sum 1\n", reconcilerMetric, histogram{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseHistogram(tt.page, tt.metric)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseHistogram = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestPercentileAndMedian(t *testing.T) {
	sorted := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tt := range []struct {
		p, want float64
	}{{0.5, 5}, {0.99, 10}, {0, 1}, {1, 10}} {
		if got := percentile(sorted, tt.p); got != tt.want {
			t.Errorf("percentile(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if !math.IsNaN(percentile(nil, 0.5)) {
		t.Error("percentile of nothing is not NaN")
	}
	for _, tt := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{nan, 5, 1, nan}, 3}} {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if !math.IsNaN(median([]float64{nan})) {
		t.Error("median of NaNs is not NaN")
	}
}

func TestFormat(t *testing.T) {
	for _, tt := range []struct {
		v    float64
		u    unit
		want string
	}{
		{3456.4, perSecond, "3,456/s"},
		{1234567, count, "1,234,567"},
		{4.567, milliseconds, "4.57 ms"},
		{-1500, milliseconds, "-1,500 ms"},
		{123.4e6, megabytes, "123.4 MB"},
		{612, bytesUnit, "612 B"},
		{nan, perSecond, "n/a"},
	} {
		if got := format(tt.v, tt.u); got != tt.want {
			t.Errorf("format(%v, %v) = %q, want %q", tt.v, tt.u, got, tt.want)
		}
	}
}

func TestTargetMet(t *testing.T) {
	burst := burstTarget()
	for _, tt := range []struct {
		t          target
		v, ceiling float64
		want       string
	}{
		{burst, 3500, 9000, "yes"},
		{burst, 3500, 11000, "no"}, // under 0.35 × ceiling
		{burst, 2900, 5000, "no"},
		{burst, 3500, nan, "no"}, // no ceiling to compare with
		{below(50, milliseconds), 49, nan, "yes"},
		{below(50, milliseconds), nan, nan, "n/a"},
		{none(), 0, nan, "yes"},
		{info, 7, nan, "—"},
	} {
		if got := tt.t.met(tt.v, tt.ceiling); got != tt.want {
			t.Errorf("%s met(%v, ceiling %v) = %s, want %s", tt.t.Text, tt.v, tt.ceiling, got, tt.want)
		}
	}
}

func TestParseSum(t *testing.T) {
	page := `# TYPE webhookd_dead_letters_total counter
webhookd_dead_letters_total{reason="exhausted"} 2
webhookd_dead_letters_total{reason="client_error"} 1
webhookd_dead_letters_totally 9
`
	if got, ok := parseSum(page, deadLetterMetric); got != 3 || !ok {
		t.Errorf("parseSum = %v, %v; want 3, true", got, ok)
	}
	if _, ok := parseSum("webhookd_other 1\n", deadLetterMetric); ok {
		t.Error("parseSum found an absent metric")
	}
}

func TestAtMost(t *testing.T) {
	tg := atMost(10, count)
	if tg.Text != "≤ 10" || tg.met(10, nan) != "yes" || tg.met(11, nan) != "no" {
		t.Errorf("atMost(10): %q, met(10) %s, met(11) %s", tg.Text, tg.met(10, nan), tg.met(11, nan))
	}
	if got := format(1.25, percent); got != "1.2%" && got != "1.3%" {
		t.Errorf("format(1.25, percent) = %q", got)
	}
}

func TestInFlightTable(t *testing.T) {
	if got, want := inFlightTable([]int{10, 20, 0, 5, 0, 0}), "second → most in flight: 0→10 1→20 2→0 3→5"; got != want {
		t.Errorf("inFlightTable = %q, want %q", got, want)
	}
}
