package storage_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// BenchmarkDashboardPages times every query behind the dashboard's pages
// (each filter of the deliveries page, its second page, one delivery, the
// dead letters, the endpoints with their 24 h health, the overview chart
// once its rollup is up to date; the first rollup's time is logged)
// on a deliveries table of WEBHOOKD_BENCH_DASHBOARD_DELIVERIES rows (default
// 20,000, so that make bench-smoke stays quick; the dashboard's target is
// under 100 ms each at 1,000,000):
//
//	WEBHOOKD_BENCH_DASHBOARD_DELIVERIES=1000000 go test -run '^$' -bench DashboardPages ./storage
//
// The table is built in the benchmark's own schema: 5 projects, 50
// endpoints, two deliveries per event spread over 15 days (the last one
// outside the 14-day window), 90% succeeded, 5% dead letters, 3% retrying,
// 2% pending, 20 event types (one of them rare), and an attempt for each
// delivery of the last day.
func BenchmarkDashboardPages(b *testing.B) {
	n := 20_000
	if v := os.Getenv("WEBHOOKD_BENCH_DASHBOARD_DELIVERIES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			b.Fatalf("WEBHOOKD_BENCH_DASHBOARD_DELIVERIES=%q: want a number of at least 100", v)
		}
	}
	db := testenv.DB(b)
	ctx := context.Background()
	now := time.Now().UTC()
	seed := seedDashboard(b, db, n, now)
	s := db.Store()
	since := now.Add(-14 * 24 * time.Hour)
	page := storage.Page{Limit: 50}

	deliveries := []struct {
		name string
		f    storage.DashboardFilter
		page storage.Page
	}{
		{"deliveries/all", storage.DashboardFilter{}, page},
		{"deliveries/all/page2", storage.DashboardFilter{}, storage.Page{Limit: 50, Cursor: seed.midCursor}},
		{"deliveries/status=succeeded", storage.DashboardFilter{Status: "succeeded"}, page},
		{"deliveries/status=dead_letter", storage.DashboardFilter{Status: "dead_letter"}, page},
		{"deliveries/status=retrying", storage.DashboardFilter{Status: "retrying"}, page},
		{"deliveries/status=pending", storage.DashboardFilter{Status: "pending"}, page},
		{"deliveries/project", storage.DashboardFilter{ProjectID: seed.projects[0]}, page},
		{"deliveries/project+status=pending", storage.DashboardFilter{ProjectID: seed.projects[0], Status: "pending"}, page},
		{"deliveries/endpoint", storage.DashboardFilter{EndpointID: seed.endpoints[0]}, page},
		{"deliveries/endpoint+status=dead_letter", storage.DashboardFilter{EndpointID: seed.endpoints[0], Status: "dead_letter"}, page},
		{"deliveries/event_type", storage.DashboardFilter{EventType: "type.1"}, page},
		{"deliveries/event_type=rare", storage.DashboardFilter{EventType: "rare.type"}, page},
		{"deliveries/event_type=missing", storage.DashboardFilter{EventType: "no.such.type"}, page},
		{"deliveries/event_type+status=pending", storage.DashboardFilter{EventType: "type.1", Status: "pending"}, page},
		{"deliveries/event_type=rare+status=succeeded", storage.DashboardFilter{EventType: "rare.type", Status: "succeeded"}, page},
		{"deliveries/event_id", storage.DashboardFilter{EventID: seed.eventID}, page},
		{"deliveries/delivery_id", storage.DashboardFilter{DeliveryID: seed.deliveryID}, page},
		{"deliveries/delivery_id=missing", storage.DashboardFilter{DeliveryID: "dlv_01ZZZZZZZZZZZZZZZZZZZZZZZZ"}, page},
		// Filters that contradict each other: nothing matches.
		{"deliveries/empty/project+foreign_endpoint", storage.DashboardFilter{ProjectID: seed.projects[1], EndpointID: seed.endpoints[0]}, page},
		{"deliveries/empty/project+event_type=missing", storage.DashboardFilter{ProjectID: seed.projects[0], EventType: "no.such.type"}, page},
		{"deliveries/empty/status=succeeded+event_type=missing", storage.DashboardFilter{Status: "succeeded", EventType: "no.such.type"}, page},
		{"deliveries/empty/endpoint+event_type=missing", storage.DashboardFilter{EndpointID: seed.endpoints[0], EventType: "no.such.type"}, page},
		{"deliveries/empty/project+status+event_type=rare", storage.DashboardFilter{ProjectID: seed.projects[4], Status: "pending", EventType: "rare.type"}, page},
	}
	for _, c := range deliveries {
		b.Run(c.name, func(b *testing.B) {
			f := c.f
			f.Since = since
			for b.Loop() {
				if _, _, err := s.DashboardDeliveries(ctx, f, c.page); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("delivery", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.DashboardDelivery(ctx, seed.deliveryID); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name string
		f    storage.DashboardDeadLetterFilter
	}{
		{"dead_letters/all", storage.DashboardDeadLetterFilter{}},
		{"dead_letters/endpoint", storage.DashboardDeadLetterFilter{EndpointID: seed.endpoints[0]}},
		{"dead_letters/event_type=missing", storage.DashboardDeadLetterFilter{EventType: "no.such.type"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			f := c.f
			f.Since = since
			for b.Loop() {
				if _, _, err := s.DashboardDeadLetters(ctx, f, page); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("overview", func(b *testing.B) {
		// The first view rolls the whole day up; later ones read the rollup.
		start := time.Now()
		if _, err := s.Overview(ctx, now, 24*time.Hour, 5*time.Minute); err != nil {
			b.Fatal(err)
		}
		b.Logf("first overview, rolling up 24 h of attempts: %s", time.Since(start))
		for b.Loop() {
			if _, err := s.Overview(ctx, now, 24*time.Hour, 5*time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("endpoints", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.DashboardEndpoints(ctx, "", now.Add(-24*time.Hour), page); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// dashboardSeed names rows of the seeded table that the benchmark asks for.
type dashboardSeed struct {
	projects, endpoints []string
	eventID, deliveryID string
	midCursor           string // a delivery id halfway down the window
}

// seedDashboard fills db with n deliveries (and their events, dead letters
// and the last day's attempts) with COPY, then analyzes the tables.
func seedDashboard(b testing.TB, db *storage.DB, n int, now time.Time) dashboardSeed {
	b.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	entropy := ulid.Monotonic(rand.NewChaCha8([32]byte{1}), 0)
	id := func(prefix string, t time.Time) string {
		return prefix + ulid.MustNew(ulid.Timestamp(t), entropy).String()
	}
	var seed dashboardSeed
	pool := db.Pool()
	for i := range 5 {
		p := id("prj_", now.Add(-30*24*time.Hour))
		seed.projects = append(seed.projects, p)
		if _, err := pool.Exec(ctx, `INSERT INTO projects (id, name) VALUES ($1, $2)`, p, fmt.Sprintf("project-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 50 {
		e := id("ep_", now.Add(-30*24*time.Hour))
		seed.endpoints = append(seed.endpoints, e)
		if _, err := pool.Exec(ctx, `INSERT INTO endpoints (id, project_id, url, secret) VALUES ($1, $2, $3, 'whsec_AAAA')`,
			e, seed.projects[i%5], fmt.Sprintf("https://receiver-%d.example.com/hook", i)); err != nil {
			b.Fatal(err)
		}
	}
	span := 15 * 24 * time.Hour
	start := now.Add(-span)
	var events, deliveries, attempts, deadLetters [][]any
	for i := range n / 2 {
		at := start.Add(time.Duration(float64(span) * float64(i) / float64(n/2)))
		ev := id("evt_", at)
		typ := "type." + strconv.Itoa(rng.IntN(19))
		if rng.IntN(10_000) == 0 {
			typ = "rare.type"
		}
		project := rng.IntN(5)
		events = append(events, []any{ev, seed.projects[project], typ, `{"n":` + strconv.Itoa(i) + `}`, at})
		for j := range 2 {
			ep := seed.endpoints[project+5*((2*i+j)%10)] // an endpoint of the event's project
			dl := id("dlv_", at)
			status, attemptsCount, code := "succeeded", 1, any(200)
			var next any
			switch r := rng.IntN(100); {
			case r < 5:
				status, code = "dead_letter", 500
				deadLetters = append(deadLetters, []any{id("dl_", at), seed.projects[project], dl, ev, ep, typ, "exhausted", 500, at})
			case r < 8:
				status, code, next = "retrying", 503, at.Add(time.Hour)
			case r < 10:
				status, attemptsCount, code, next = "pending", 0, nil, at
			}
			deliveries = append(deliveries, []any{dl, seed.projects[project], ev, ep, typ, status, attemptsCount, attemptsCount, next, code, at, at})
			if attemptsCount > 0 && now.Sub(at) < 24*time.Hour {
				attempts = append(attempts, []any{dl, 1, id("req_", at), "https://receiver.example.com/hook", "auto", code,
					int64(20), at})
			}
			if i == n/4 {
				seed.eventID, seed.deliveryID, seed.midCursor = ev, dl, dl
			}
		}
	}
	for _, c := range []struct {
		table string
		cols  []string
		rows  [][]any
	}{
		{"events", []string{"id", "project_id", "type", "data", "created_at"}, events},
		{"deliveries", []string{"id", "project_id", "event_id", "endpoint_id", "event_type", "status", "attempts_count",
			"auto_attempts", "next_attempt_at", "last_status_code", "created_at", "updated_at"}, deliveries},
		{"dead_letters", []string{"id", "project_id", "delivery_id", "event_id", "endpoint_id", "event_type", "reason",
			"last_status_code", "dead_lettered_at"}, deadLetters},
		{"attempts", []string{"delivery_id", "number", "request_id", "url", "trigger", "status_code", "duration_ms",
			"started_at"}, attempts},
	} {
		if _, err := pool.CopyFrom(ctx, pgx.Identifier{c.table}, c.cols, pgx.CopyFromRows(c.rows)); err != nil {
			b.Fatalf("copy %s: %v", c.table, err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE projects, endpoints, events, deliveries, dead_letters, attempts`); err != nil {
		b.Fatal(err)
	}
	return seed
}
