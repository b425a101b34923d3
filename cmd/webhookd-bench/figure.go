package main

import (
	"fmt"
	"math"
	"strconv"
)

// unit says how a figure's value is written.
type unit int

const (
	perSecond    unit = iota // deliveries/s or tasks/s
	milliseconds             // ms
	count                    // a plain number
	bytesUnit                // B
	megabytes                // MB (10^6 B), from bytes
	seconds                  // s
	percent                  // %
)

// figure is one measured value of one scenario run.
type figure struct {
	Name       string
	Unit       unit
	Value      float64 // NaN: not measured
	Target     target
	Throughput bool // compared with the asynq no-op ceiling
	Up         bool // higher is better, though no rate (a share of capacity, a load reached)
}

// target is what a figure should be. Met is nil for a figure reported for
// information only.
type target struct {
	Text string
	Met  func(v, ceiling float64) bool
}

// atLeast wants v ≥ x.
func atLeast(x float64, u unit) target {
	return target{Text: "≥ " + format(x, u), Met: func(v, _ float64) bool { return v >= x }}
}

// below wants v < x.
func below(x float64, u unit) target {
	return target{Text: "< " + format(x, u), Met: func(v, _ float64) bool { return v < x }}
}

// atMost wants v ≤ x.
func atMost(x float64, u unit) target {
	return target{Text: "≤ " + format(x, u), Met: func(v, _ float64) bool { return v <= x }}
}

// none wants v = 0.
func none() target {
	return target{Text: "0", Met: func(v, _ float64) bool { return v == 0 }}
}

// info is the target of a figure reported for information.
var info = target{Text: "—"}

// met answers yes, no, n/a (no value or no ceiling) or — (no target).
func (t target) met(v, ceiling float64) string {
	switch {
	case t.Met == nil:
		return "—"
	case math.IsNaN(v):
		return "n/a"
	case t.Met(v, ceiling):
		return "yes"
	default:
		return "no"
	}
}

// format writes v in unit u; NaN is "n/a".
func format(v float64, u unit) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	switch u {
	case perSecond:
		return thousands(v) + "/s"
	case milliseconds:
		if math.Abs(v) < 10 {
			return strconv.FormatFloat(v, 'f', 2, 64) + " ms"
		}
		return thousands(v) + " ms"
	case bytesUnit:
		return thousands(v) + " B"
	case megabytes:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + " MB"
	case seconds:
		return strconv.FormatFloat(v, 'f', 1, 64) + " s"
	case percent:
		return strconv.FormatFloat(v, 'f', 1, 64) + "%"
	default:
		return thousands(v)
	}
}

// thousands rounds v and separates thousands with commas: 12,345.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(math.Abs(v))), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if v < 0 && s != "0" {
		s = "-" + s
	}
	return s
}

// ratio writes v / ceiling as "0.42×".
func ratio(v, ceiling float64) string {
	if math.IsNaN(v) || math.IsNaN(ceiling) || ceiling == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", v/ceiling)
}

// tolerance is how much worse than the baseline's a candidate's median may
// be: the team's rule is within 10% of the binary before the change.
const tolerance = 0.10

// tolerancePercent is tolerance as "10%".
func tolerancePercent() string { return strconv.FormatFloat(tolerance*100, 'f', -1, 64) + "%" }

// higherIsBetter says which way a figure improves: rates (the throughput
// figures and every other /s) and figures marked Up (a share of capacity)
// up, everything else (latencies, sizes, times, events lost, requests
// refused or held) down. It is the targets' direction too: atLeast is only
// ever set on those, below, atMost and none on the rest.
func (f figure) higherIsBetter() bool { return f.Throughput || f.Up || f.Unit == perSecond }

// versus compares a candidate's median c with the baseline's b for a figure
// that improves upward when up: the ratio c/b ("0.957×"), and whether c is
// within tolerance of b in the direction that matters ("yes", "no", or "n/a"
// when either is not measured). Equal values are 1.000× (0 and 0 included);
// anything against a baseline of 0 is ∞.
func versus(c, b float64, up bool) (text, within string) {
	switch {
	case math.IsNaN(c) || math.IsNaN(b):
		return "n/a", "n/a"
	case c == b:
		return "1.000×", "yes"
	case b == 0:
		if up == (c > 0) {
			return "∞", "yes"
		}
		return "∞", "no"
	}
	r := c / b
	worse := r > 1+tolerance
	if up {
		worse = r < 1-tolerance
	}
	if worse {
		return fmt.Sprintf("%.3f×", r), "no"
	}
	return fmt.Sprintf("%.3f×", r), "yes"
}
