package main

import (
	"context"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestHistoryGenerator fills a schema with 2 days of 2,000 deliveries and
// checks what a reader of the database sees: the counts, times that agree
// with each other, and rows that storage's own list and read functions
// (the API's and the dashboard's) read back.
func TestHistoryGenerator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema, dbURL := testenv.Schema(t)
	now := time.Date(2026, 3, 10, 9, 30, 0, 0, time.UTC)
	o := &historyOptions{DatabaseURL: dbURL, Days: 2, Deliveries: 2000, Projects: 2, Endpoints: 8, Streams: 2,
		PayloadBytes: 1024, Seed: 7}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	sum, err := generateHistory(ctx, o, now)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int64{}
	for _, tb := range sum.Tables {
		rows[tb.Name] = tb.Rows
		if tb.Total <= 0 {
			t.Errorf("%s: total size %d", tb.Name, tb.Total)
		}
	}
	if sum.Written != 2000 || rows["deliveries"] != 2000 {
		t.Fatalf("deliveries: wrote %d, table holds %d; want 2000", sum.Written, rows["deliveries"])
	}
	if rows["events"] < 500 || rows["events"] > 2000 || rows["attempts"] < 2000 {
		t.Fatalf("rows %v: want 500–2000 events (1 to 4 deliveries each) and an attempt a delivery at least", rows)
	}

	db, err := storage.Open(ctx, storage.Config{URL: testenv.DatabaseURL(), SearchPath: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Times agree: the day's range, event = delivery creation ≤ attempts
	// ≤ last update; counts agree with the attempts; dead letters match.
	end := historyEnd(now)
	checks := map[string]string{
		"a delivery outside the range": `SELECT count(*) FROM deliveries WHERE created_at < $1 OR created_at >= $2`,
		"a delivery made apart from its event": `SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_id
			WHERE e.created_at <> d.created_at`,
		"a delivery without its event": `SELECT count(*) FROM deliveries d WHERE NOT EXISTS (SELECT FROM events e WHERE e.id = d.event_id)`,
		"an event without deliveries":  `SELECT count(*) FROM events e WHERE NOT EXISTS (SELECT FROM deliveries d WHERE d.event_id = e.id)`,
		"an attempt out of its time": `SELECT count(*) FROM attempts a JOIN deliveries d ON d.id = a.delivery_id
			WHERE a.started_at < d.created_at OR a.started_at > d.updated_at OR d.updated_at > now()`,
		"a delivery whose count is not its attempts'": `SELECT count(*) FROM deliveries d
			WHERE d.attempts_count <> (SELECT count(*) FROM attempts a WHERE a.delivery_id = d.id)`,
		"a dead letter apart from its delivery": `SELECT count(*) FROM deliveries d FULL JOIN dead_letters l ON l.delivery_id = d.id
			WHERE (d.status = 'dead_letter') <> (l.id IS NOT NULL) OR l.dead_lettered_at <> d.updated_at`,
		"an id not in the project's format": `SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_id
			WHERE d.id !~ '^dlv_[0-9A-Z]{26}$' OR e.id !~ '^evt_[0-9A-Z]{26}$'`,
		"a payload far from 1 KiB": `SELECT count(*) FROM events WHERE octet_length(data::text) NOT BETWEEN 400 AND 1700`,
	}
	for what, q := range checks {
		var n int
		args := []any{}
		if what == "a delivery outside the range" {
			args = []any{end.AddDate(0, 0, -2), end}
		}
		if err := db.Pool().QueryRow(ctx, q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n != 0 {
			t.Errorf("%d rows: %s", n, what)
		}
	}
	var dead, retried int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'dead_letter'),
		count(*) FILTER (WHERE status = 'succeeded' AND attempts_count > 1) FROM deliveries`).Scan(&dead, &retried); err != nil {
		t.Fatal(err)
	}
	if dead == 0 || dead > 60 || retried < 40 || retried > 200 {
		t.Errorf("%d dead letters and %d retried successes of 2000: want about 1%% and 5%%", dead, retried)
	}

	// What the API reads: a project's deliveries newest first, one with its
	// attempts, and its dead letters.
	var projectID string
	if err := db.Pool().QueryRow(ctx, `SELECT project_id FROM dead_letters LIMIT 1`).Scan(&projectID); err != nil {
		t.Fatal(err)
	}
	s := db.Store()
	list, more, err := s.ListDeliveries(ctx, projectID, storage.DeliveryFilter{}, storage.Page{Limit: 50})
	if err != nil || len(list) != 50 || !more {
		t.Fatalf("list deliveries: %d, more %v, %v", len(list), more, err)
	}
	failed, _, err := s.ListDeliveries(ctx, projectID, storage.DeliveryFilter{Status: webhookd.DeliveryDeadLetter}, storage.Page{Limit: 100})
	if err != nil || len(failed) == 0 {
		t.Fatalf("list dead-letter deliveries: %d, %v", len(failed), err)
	}
	d, err := s.GetDelivery(ctx, projectID, failed[0].ID)
	if err != nil || len(d.Attempts) != d.AttemptsCount || d.Attempts[0].RequestHeaders["Webhook-Id"] != d.EventID {
		t.Fatalf("get delivery: %+v, %v", d, err)
	}
	dls, _, err := s.ListDeadLetters(ctx, projectID, storage.DeadLetterFilter{}, storage.Page{Limit: 100})
	if err != nil || len(dls) == 0 {
		t.Fatalf("list dead letters: %d, %v", len(dls), err)
	}
	if _, err := s.GetEvent(ctx, projectID, d.EventID); err != nil {
		t.Fatalf("get event: %v", err)
	}
}
