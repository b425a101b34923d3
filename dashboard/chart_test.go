package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd/storage"
)

func TestOverviewChartDrawsStackedBarsAndTheBacklog(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	o := storage.Overview{Due: 12, Scheduled: 1234, Capped: false}
	for i := range 60 {
		o.Minutes = append(o.Minutes, storage.MinuteCounts{Minute: start.Add(time.Duration(i) * time.Minute)})
	}
	o.Minutes[10] = storage.MinuteCounts{Minute: o.Minutes[10].Minute, Succeeded: 30, Failed: 8, DeadLettered: 2}
	o.Minutes[59] = storage.MinuteCounts{Minute: o.Minutes[59].Minute, Succeeded: 5}
	c := newChart(o, "24 hours")
	if c.Max != 50 || c.Peak != 40 || !c.PeakAt.Equal(o.Minutes[10].Minute) {
		t.Fatalf("max %d, peak %d at %v", c.Max, c.Peak, c.PeakAt)
	}
	doc := renderDoc(t, overviewChart(c))
	svg := doc.Find("svg#overview-chart")
	if svg.AttrOr("viewBox", "") != "0 0 60 100" {
		t.Errorf("viewBox %q", svg.AttrOr("viewBox", ""))
	}
	// Minute 10 stacks 30 ok (60 units high, from the bottom), 8 failed
	// above it and 2 dead above that; minute 59 has 5 ok.
	for class, want := range map[string]string{"s-ok": "M10 40.00h1v60.00h-1zM59 90.00h1v10.00h-1z",
		"s-failed": "M10 24.00h1v16.00h-1z", "s-dead": "M10 20.00h1v4.00h-1z"} {
		if got := svg.Find("path."+class).AttrOr("d", ""); got != want {
			t.Errorf("%s: d=%q, want %q", class, got, want)
		}
	}
	for id, want := range map[string]string{"total-succeeded": "35", "total-failed": "8", "total-dead": "2"} {
		if got := doc.Find("#" + id).Text(); got != want {
			t.Errorf("#%s = %q, want %q", id, got, want)
		}
	}
	if got := strings.Join(strings.Fields(doc.Find("#backlog").Text()), " "); got != "Backlog: 12 due now, 1,234 scheduled" {
		t.Errorf("backlog %q", got)
	}
	if labels := doc.Find(".x-labels span"); labels.Length() != 5 || labels.First().Text() != "00:00" || labels.Last().Text() != "00:59" {
		t.Errorf("%d x labels, %q … %q", labels.Length(), labels.First().Text(), labels.Last().Text())
	}
	if !strings.Contains(doc.Text(), "Busiest minute: 40 at 00:10 UTC") {
		t.Errorf("no busiest minute")
	}

	empty := renderDoc(t, overviewChart(newChart(storage.Overview{Capped: true, Due: 10_001}, "24 hours")))
	if !strings.Contains(empty.Text(), "No attempts in this period") || !strings.Contains(empty.Text(), "counted up to 10,000") {
		t.Errorf("empty chart: %q", empty.Text())
	}
}

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 5, 6: 10, 10: 10, 11: 20, 40: 50, 51: 100, 4000: 5000} {
		if got := niceCeil(n); got != want {
			t.Errorf("niceCeil(%d) = %d, want %d", n, got, want)
		}
	}
}
