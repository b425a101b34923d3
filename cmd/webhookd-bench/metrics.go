package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// reconcilerMetric is the histogram of reconciler pass durations.
const reconcilerMetric = "webhookd_reconciler_pass_seconds"

// histogram is a Prometheus histogram's _sum and _count.
type histogram struct{ sum, count float64 }

// parseHistogram finds name's _sum and _count in a /metrics text page,
// added up over label sets. ok is false when the page has neither.
func parseHistogram(page, name string) (h histogram, ok bool) {
	for line := range strings.SplitSeq(page, "\n") {
		var dst *float64
		rest, found := strings.CutPrefix(line, name+"_sum")
		if found {
			dst = &h.sum
		} else if rest, found = strings.CutPrefix(line, name+"_count"); found {
			dst = &h.count
		}
		if !found || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			*dst += v
			ok = true
		}
	}
	return h, ok
}

// passTimes is what was seen of the reconciler's passes.
type passTimes struct {
	Passes int
	Mean   float64 // seconds
	Max    float64 // seconds: the largest mean over one scrape interval
}

// watchReconciler scrapes metricsURL every 100 ms until it has seen at
// least passes reconciler passes or wait has passed. Each scrape's new
// passes give one mean, so with one pass per scrape the max is exact.
// found is false when the metric never appeared within absent.
func watchReconciler(ctx context.Context, client *http.Client, metricsURL string, passes int,
	absent, wait time.Duration) (t passTimes, found bool, err error) {
	start := time.Now()
	var last histogram
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		code, body, err := get(ctx, client, metricsURL)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("GET /metrics answered %d", code)
		}
		if err != nil {
			return t, found, err
		}
		if h, ok := parseHistogram(string(body), reconcilerMetric); ok {
			found = true
			if h.count > last.count {
				t.Max = math.Max(t.Max, (h.sum-last.sum)/(h.count-last.count))
				t.Passes, t.Mean, last = int(h.count), h.sum/h.count, h
			}
		}
		switch {
		case t.Passes >= passes:
			return t, true, nil
		case !found && time.Since(start) > absent, time.Since(start) > wait:
			return t, found, nil
		}
		select {
		case <-ctx.Done():
			return t, found, ctx.Err()
		case <-tick.C:
		}
	}
}

// parseSum adds up the samples of metric name (a counter or gauge) over
// its label sets in a /metrics text page. ok is false when it has none.
func parseSum(page, name string) (sum float64, ok bool) {
	for line := range strings.SplitSeq(page, "\n") {
		rest, found := strings.CutPrefix(line, name)
		if !found || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			sum += v
			ok = true
		}
	}
	return sum, ok
}

// deadLetterMetric counts dead letters by reason.
const deadLetterMetric = "webhookd_dead_letters_total"

// scrapeSum reads metric name's sum from each metrics URL and adds them
// up; NaN when no page has it.
func scrapeSum(ctx context.Context, client *http.Client, name string, urls ...string) (float64, error) {
	total, any := 0.0, false
	for _, u := range urls {
		code, body, err := get(ctx, client, u)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("GET %s answered %d", u, code)
		}
		if err != nil {
			return nan, err
		}
		if v, ok := parseSum(string(body), name); ok {
			total, any = total+v, true
		}
	}
	if !any {
		return nan, nil
	}
	return total, nil
}
