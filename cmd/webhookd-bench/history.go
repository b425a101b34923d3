package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/webhookd/webhookd/storage"
)

// A history is what a busy installation keeps (issue 34): -history
// deliveries over -history-days days up to now, two per event, in the
// project "bench" to endpoints of their own, written with COPY (not the
// API) into a template database made once and kept; every scenario run's
// database is then a copy of it (CREATE DATABASE ... TEMPLATE).
//
// Of every 100 events, one's deliveries were dead-lettered after 5
// attempts, three's succeeded at the second attempt, and the rest's at the
// first; nothing waits. Ids are ULIDs of the event's time, as webhookd's
// own: each row lands in its day's partition.
const (
	historyEndpoints      = 50
	historyPerEvent       = 2   // deliveries per event
	historyDeadEvery      = 100 // one event in this many is dead-lettered
	historyDeadAttempts   = 5
	historyEventType      = "history.order.updated"
	historyTemplateMarker = "webhookd-bench history complete"
)

// historyTemplate returns the template database holding a history of n
// deliveries, generating it with the webhookd binary bin (which migrates
// it) unless it exists complete. One at a time: runs wait for the first.
func historyTemplate(ctx context.Context, o *Options, bin string, n int) (string, error) {
	historyMu.Lock()
	defer historyMu.Unlock()
	name := fmt.Sprintf("webhookd_bench_history_%d_%dd", n, o.HistoryDays)
	admin, err := pgx.Connect(ctx, o.DatabaseURL)
	if err != nil {
		return "", fmt.Errorf("history: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	var marker *string
	err = admin.QueryRow(ctx, `SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1`, name).Scan(&marker)
	if err == nil && marker != nil && *marker == historyTemplateMarker {
		return name, nil
	}
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("history: %w", err)
	}
	db, err := createDatabase(ctx, o.DatabaseURL, name, "")
	if err != nil {
		return "", err
	}
	start := time.Now()
	progress("history: generating %s deliveries over %d days into %s", thousands(float64(n)), o.HistoryDays, name)
	env := []string{"WEBHOOKD_DATABASE_URL=" + db.URL, "WEBHOOKD_LOG_LEVEL=warn"}
	if _, err := runCommand(ctx, bin, env, "migrate"); err != nil {
		return "", fmt.Errorf("history: migrate: %w", err)
	}
	if _, err := runCommand(ctx, bin, env, "keys", "create", "--project", "bench"); err != nil {
		return "", fmt.Errorf("history: project: %w", err)
	}
	if err := generateHistory(ctx, db.URL, n, o.HistoryDays); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("COMMENT ON DATABASE %s IS '%s'", name, historyTemplateMarker)); err != nil {
		return "", fmt.Errorf("history: %w", err)
	}
	progress("history: %s generated in %s", name, time.Since(start).Round(time.Second))
	return name, nil
}

var historyMu sync.Mutex

// generateHistory writes the history into the migrated database at dbURL:
// the days' partitions from the first day, the endpoints, then each table
// with one COPY, in time order as webhookd would have written them, and
// VACUUM ANALYZE.
func generateHistory(ctx context.Context, dbURL string, n, days int) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	now := time.Now().UTC()
	from := now.Add(-time.Duration(days) * 24 * time.Hour)
	sdb, err := storage.Open(ctx, storage.Config{URL: dbURL})
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	err = sdb.Store().StartDaysAt(ctx, from, now, 72*time.Hour)
	sdb.Close()
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	var project string
	if err := conn.QueryRow(ctx, `SELECT id FROM projects WHERE name = 'bench'`).Scan(&project); err != nil {
		return fmt.Errorf("history: project: %w", err)
	}
	// Endpoints of the history's own type: the scenarios' events never
	// match them.
	if _, err := conn.Exec(ctx, `INSERT INTO endpoints (id, project_id, url, event_types, secret)
		SELECT 'ep_history_' || i, $1, 'http://127.0.0.1:9/history/' || i, ARRAY[$2], 'whsec_aGlzdG9yeWhpc3Rvcnk='
		FROM generate_series(1, $3::int) i`, project, historyEventType, historyEndpoints); err != nil {
		return fmt.Errorf("history: endpoints: %w", err)
	}
	g := historyGen{project: project, events: (n + historyPerEvent - 1) / historyPerEvent, from: from, span: now.Sub(from) - time.Minute}
	for _, t := range []struct {
		table string
		cols  []string
		rows  func(yield func([]any) bool)
	}{
		{"events", []string{"id", "project_id", "type", "data", "external_id", "created_at"}, g.eventRows},
		{"deliveries", []string{"id", "project_id", "event_id", "endpoint_id", "event_type", "status", "attempts_count",
			"auto_attempts", "last_status_code", "created_at", "updated_at"}, g.deliveryRows},
		{"attempts", []string{"delivery_id", "number", "request_id", "url", "trigger", "status_code", "duration_ms",
			"started_at", "request_headers", "response_headers", "response_body"}, g.attemptRows},
		{"dead_letters", []string{"id", "project_id", "delivery_id", "event_id", "endpoint_id", "event_type", "reason",
			"last_status_code", "dead_lettered_at"}, g.deadLetterRows},
	} {
		began := time.Now()
		next, stop := iter.Pull(iter.Seq[[]any](t.rows))
		copied, err := conn.CopyFrom(ctx, pgx.Identifier{t.table}, t.cols, pgx.CopyFromFunc(func() ([]any, error) {
			row, ok := next()
			if !ok {
				return nil, nil
			}
			return row, nil
		}))
		stop()
		if err != nil {
			return fmt.Errorf("history: copy %s: %w", t.table, err)
		}
		progress("history:   %s %s rows in %s", t.table, thousands(float64(copied)), time.Since(began).Round(time.Second))
	}
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) events, deliveries, attempts, dead_letters`); err != nil {
		return fmt.Errorf("history: vacuum: %w", err)
	}
	return nil
}

// historyGen makes the history's rows, the same ones for every table that
// refers to them: event i's time and ids are functions of i.
type historyGen struct {
	project string
	events  int
	from    time.Time
	span    time.Duration
}

func (g *historyGen) at(i int) time.Time {
	return g.from.Add(time.Duration(int64(g.span) / int64(g.events) * int64(i)))
}

// id is prefix + a ULID of event i's time whose entropy is kind, i and j.
func (g *historyGen) id(prefix string, kind byte, i, j int) string {
	var e [10]byte
	e[0] = kind
	binary.BigEndian.PutUint32(e[1:5], uint32(i))
	binary.BigEndian.PutUint32(e[5:9], uint32(j))
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(g.at(i)))
	_ = u.SetEntropy(e[:])
	return prefix + u.String()
}

func (g *historyGen) dead(i int) bool { return i%historyDeadEvery == 0 }

// attempts is how many attempts event i's deliveries took.
func (g *historyGen) attempts(i int) int {
	switch {
	case g.dead(i):
		return historyDeadAttempts
	case i%historyDeadEvery <= 3:
		return 2
	}
	return 1
}

func (g *historyGen) endpoint(i, j int) string {
	return fmt.Sprintf("ep_history_%d", (i*historyPerEvent+j)%historyEndpoints+1)
}

func (g *historyGen) eventRows(yield func([]any) bool) {
	for i := range g.events {
		data := fmt.Sprintf(`{"order":{"id":%d,"status":"paid","total":%d.%02d,"currency":"EUR","customer":{"id":"cus_%08d","email":"customer%d@example.com"},"items":[{"sku":"SKU-%04d","qty":%d}]}}`,
			i, i%997, i%100, i%100000, i%100000, i%5000, i%7+1)
		if !yield([]any{g.id("evt_", 0, i, 0), g.project, historyEventType, data, nil, g.at(i)}) {
			return
		}
	}
}

func (g *historyGen) deliveryRows(yield func([]any) bool) {
	for i := range g.events {
		status, code := "succeeded", int32(200)
		if g.dead(i) {
			status, code = "dead_letter", 500
		}
		n := int32(g.attempts(i))
		done := g.at(i).Add(time.Duration(n) * time.Second)
		for j := range historyPerEvent {
			if !yield([]any{g.id("dlv_", 1, i, j), g.project, g.id("evt_", 0, i, 0), g.endpoint(i, j), historyEventType,
				status, n, n, code, g.at(i), done}) {
				return
			}
		}
	}
}

const historyRequestHeaders = `{"Content-Type":"application/json","User-Agent":"webhookd/1","Webhook-Id":"msg","Webhook-Timestamp":"1764800000","Webhook-Signature":"v1,c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlPQ==","X-Request-Id":"req"}`

func (g *historyGen) attemptRows(yield func([]any) bool) {
	for i := range g.events {
		n := g.attempts(i)
		for j := range historyPerEvent {
			dlv := g.id("dlv_", 1, i, j)
			for a := 1; a <= n; a++ {
				code := int32(200)
				if a < n || g.dead(i) {
					code = 500
				}
				if !yield([]any{dlv, int32(a), g.id("req_", byte(2+a), i, j), "http://127.0.0.1:9/history/", "auto", code,
					int64(20 + i%80), g.at(i).Add(time.Duration(a-1) * time.Second), historyRequestHeaders,
					`{"Content-Type":"text/plain"}`, "ok"}) {
					return
				}
			}
		}
	}
}

func (g *historyGen) deadLetterRows(yield func([]any) bool) {
	for i := 0; i < g.events; i += historyDeadEvery {
		at := g.at(i).Add(historyDeadAttempts * time.Second)
		for j := range historyPerEvent {
			if !yield([]any{g.id("dl_", 7, i, j), g.project, g.id("dlv_", 1, i, j), g.id("evt_", 0, i, 0), g.endpoint(i, j),
				historyEventType, "exhausted", int32(500), at}) {
				return
			}
		}
	}
}

// historySize describes the history's tables: rows, and bytes of table,
// index and in all (pg_total_relation_size over the partitions).
func historySize(ctx context.Context, dbURL string) (string, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var parts []string
	for _, t := range []string{"events", "deliveries", "attempts", "dead_letters"} {
		var rows, table, index int64
		err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+t+`),
			coalesce(sum(pg_table_size(relid)), 0), coalesce(sum(pg_indexes_size(relid)), 0)
			FROM pg_partition_tree($1) WHERE isleaf`, t).Scan(&rows, &table, &index)
		if err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("%s %s rows (table %s, indexes %s)", t, thousands(float64(rows)),
			bytesText(table), bytesText(index)))
	}
	return strings.Join(parts, "; "), nil
}

func bytesText(b int64) string {
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}

// historyConditions makes the history template (for the larger of the two
// sides' histories), describes it in env, and turns PostgreSQL's
// autovacuum on for the session, as a server keeping a long history runs
// it (this machine's is off); restore sets it back.
func historyConditions(ctx context.Context, o *Options, env *environment) (restore func(), err error) {
	n := max(o.History, o.BaselineHistory)
	name, err := historyTemplate(ctx, o, o.Webhookd, n)
	if err != nil {
		return nil, err
	}
	size, err := historySize(ctx, databaseURL(o.DatabaseURL, name))
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	admin, err := pgx.Connect(ctx, o.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, `ALTER SYSTEM SET autovacuum = on`); err != nil {
		return nil, fmt.Errorf("history: autovacuum: %w", err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return nil, fmt.Errorf("history: autovacuum: %w", err)
	}
	progress("history: autovacuum turned on for the session (ALTER SYSTEM; reset at the end)")
	env.History = fmt.Sprintf("every run's database a copy of %s: %s; PostgreSQL's autovacuum on during the session "+
		"(ALTER SYSTEM, reset after)", name, size)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, o.DatabaseURL)
		if err != nil {
			progress("history: autovacuum NOT reset: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `ALTER SYSTEM RESET autovacuum`); err == nil {
			_, err = conn.Exec(ctx, `SELECT pg_reload_conf()`)
		}
		if err != nil {
			progress("history: autovacuum NOT reset: %v", err)
			return
		}
		progress("history: autovacuum reset")
	}, nil
}

// databaseURL is adminURL with its database replaced by name.
func databaseURL(adminURL, name string) string {
	u, err := url.Parse(adminURL)
	if err != nil {
		return adminURL
	}
	u.Path = "/" + name
	return u.String()
}
