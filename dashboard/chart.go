package dashboard

import (
	"fmt"
	"strings"
	"time"

	"github.com/webhookd/webhookd/storage"
)

// chartHeight is the height of the overview chart's drawing, in the units
// of its viewBox (one unit wide per minute).
const chartHeight = 100

// chartView is the overview chart: per minute, stacked bars of attempts
// that succeeded, attempts that failed and deliveries dead-lettered, drawn
// as one SVG path per series on a grid one unit wide per minute, and the
// numbers a person reads beside it.
type chartView struct {
	Width               int    // minutes drawn
	OK, Failed, Dead    string // SVG path data of each series' bars
	Grid                []int  // x of the vertical grid lines
	Labels              []string
	Max                 int // per minute, the top of the y axis
	Succeeded, Failures int
	DeadLettered        int
	Peak                int
	PeakAt              time.Time
	Due, Scheduled      int
	Capped              bool
	Window              string
}

// newChart draws o.
func newChart(o storage.Overview, window string) chartView {
	c := chartView{Width: max(len(o.Minutes), 1), Due: o.Due, Scheduled: o.Scheduled, Capped: o.Capped, Window: window}
	for _, m := range o.Minutes {
		c.Succeeded += m.Succeeded
		c.Failures += m.Failed
		c.DeadLettered += m.DeadLettered
		if t := m.Succeeded + m.Failed + m.DeadLettered; t > c.Peak {
			c.Peak, c.PeakAt = t, m.Minute
		}
	}
	c.Max = niceCeil(c.Peak)
	var ok, failed, dead strings.Builder
	for i, m := range o.Minutes {
		y := float64(chartHeight)
		for _, s := range []struct {
			b *strings.Builder
			n int
		}{{&ok, m.Succeeded}, {&failed, m.Failed}, {&dead, m.DeadLettered}} {
			if s.n == 0 {
				continue
			}
			h := float64(s.n) * chartHeight / float64(c.Max)
			y -= h
			fmt.Fprintf(s.b, "M%d %.2fh1v%.2fh-1z", i, y, h)
		}
	}
	c.OK, c.Failed, c.Dead = ok.String(), failed.String(), dead.String()
	if n := len(o.Minutes); n > 0 {
		for q := range 5 {
			i := min(q*(n-1)/4, n-1)
			c.Grid = append(c.Grid, i)
			c.Labels = append(c.Labels, o.Minutes[i].Minute.UTC().Format("15:04"))
		}
	}
	return c
}

// niceCeil is the smallest of 1, 2, 5 × 10^k at or above n (at least 1).
func niceCeil(n int) int {
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
	}
}

// thousands writes n with commas between groups of three digits.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
