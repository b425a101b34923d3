package main

import (
	"context"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"time"
)

// dashboardRequests is how many times each page is asked for.
const dashboardRequests = 100

// dashboardAdminToken logs the tool in to the dashboard.
const dashboardAdminToken = "webhookd-bench-dashboard-token"

// dashboardScenario: the dashboard's pages an operator reads most, each
// asked for dashboardRequests times one after another, on whatever history
// the run's database holds (-history-database; issue 34: p99 under 100 ms
// with 10 million deliveries). Without a history there is no page 50: its
// figures are blank.
var dashboardScenario = scenario{
	Name: "dashboard",
	Title: func(o *Options) string {
		history := "an empty database"
		if o.HistoryDatabase != "" {
			history = "the history in database " + o.HistoryDatabase
		}
		return fmt.Sprintf("the dashboard's deliveries list (the first page, a page filtered by status dead_letter, "+
			"the 50th page reached by its Next links) and one delivery's page, each asked for %d times in a row "+
			"by one client, over %s", dashboardRequests, history)
	},
	Run: runDashboard,
}

// nextLink finds a page's Next link.
var nextLink = regexp.MustCompile(`href="(/\?[^"]*cursor=[^"]*)"`)

// deliveryLink finds a delivery's link in a list.
var deliveryLink = regexp.MustCompile(`href="/deliveries/(dlv_[0-9A-Za-z_]+)"`)

func runDashboard(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := startStack(ctx, o, seq, "WEBHOOKD_ADMIN_TOKEN="+dashboardAdminToken)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	jar, _ := cookiejar.New(nil)
	c := newLoopbackClient(30 * time.Second)
	c.Jar = jar
	base := s.proc.DashboardURL
	resp, err := c.PostForm(base+"/login", url.Values{"token": {dashboardAdminToken}, "next": {"/"}})
	if err != nil {
		return result{}, fmt.Errorf("dashboard: login: %w", err)
	}
	resp.Body.Close()
	get := func(path string) (string, time.Duration, error) {
		start := time.Now()
		resp, err := c.Get(base + path)
		if err != nil {
			return "", 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		took := time.Since(start)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return string(b), took, err
	}
	// Page 50, by the Next links as a reader gets there.
	page50 := "/"
	for range 49 {
		body, _, err := get(page50)
		if err != nil {
			return result{}, fmt.Errorf("dashboard: %w", err)
		}
		m := nextLink.FindStringSubmatch(body)
		if m == nil {
			page50 = "" // fewer than 50 pages: no history
			break
		}
		page50 = html.UnescapeString(m[1])
	}
	first, _, err := get("/")
	if err != nil {
		return result{}, fmt.Errorf("dashboard: %w", err)
	}
	delivery := ""
	if m := deliveryLink.FindStringSubmatch(first); m != nil {
		delivery = "/deliveries/" + m[1]
	}
	pages := []struct{ name, path string }{
		{"deliveries list, first page", "/"},
		{"deliveries list, status dead_letter", "/?status=dead_letter"},
		{"deliveries list, page 50", page50},
		{"one delivery's page", delivery},
	}
	var figs []figure
	for _, p := range pages {
		if p.path == "" { // no such page without a history
			figs = append(figs, figure{Name: p.name + " p50", Unit: milliseconds, Value: math.NaN(), Target: info},
				figure{Name: p.name + " p99", Unit: milliseconds, Value: math.NaN(), Target: atMost(100, milliseconds)})
			continue
		}
		var ms []float64
		for range dashboardRequests {
			if _, took, err := get(p.path); err != nil {
				return result{}, fmt.Errorf("dashboard: %w", err)
			} else {
				ms = append(ms, float64(took)/float64(time.Millisecond))
			}
		}
		slices.Sort(ms)
		figs = append(figs,
			figure{Name: p.name + " p50", Unit: milliseconds, Value: percentile(ms, 0.50), Target: info},
			figure{Name: p.name + " p99", Unit: milliseconds, Value: percentile(ms, 0.99), Target: atMost(100, milliseconds)})
	}
	return result{Figures: figs}, nil
}
