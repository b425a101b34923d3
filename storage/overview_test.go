package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

func TestOverviewCountsEachMinuteOnceAndTheBacklog(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	s := db.Store()
	_, mkAt := oneEndpoint(t, db)
	now := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	mk := func() string { return mkAt(now.Add(-2 * time.Hour)) }
	ok, bad := 200, 500
	at := func(ago time.Duration) time.Time { return now.Add(-ago) }
	// 60 min ago: two successes and a failure; 30 min ago: a failure that
	// made a dead letter; 2 min ago (not settled yet): one success.
	for _, c := range []struct {
		at     time.Time
		code   int
		status string
	}{
		{at(60 * time.Minute), ok, webhookd.DeliverySucceeded},
		{at(60 * time.Minute), ok, webhookd.DeliverySucceeded},
		{at(60 * time.Minute), bad, webhookd.DeliverySucceeded},
		{at(30 * time.Minute), bad, webhookd.DeliveryDeadLetter},
		{at(2 * time.Minute), ok, webhookd.DeliverySucceeded},
	} {
		testenv.Record(t, db, mk(), webhookd.Attempt{StatusCode: &c.code, StartedAt: c.at},
			storage.Transition{Status: c.status, DeadLetterReason: webhookd.ReasonExhausted, Now: c.at})
	}
	mk() // pending, due now
	// An inspector attempt is not counted.
	insp := mk()
	if err := db.RecordInspectorAttempt(ctx, webhookd.Attempt{DeliveryID: insp, Number: 1, RequestID: storage.NewRequestID(),
		URL: "http://x/in/bin_inspector", Trigger: webhookd.TriggerInspector, StatusCode: &ok, StartedAt: at(60 * time.Minute)}); err != nil {
		t.Fatal(err)
	}

	check := func() {
		t.Helper()
		o, err := s.Overview(ctx, now, 24*time.Hour, 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(o.Minutes) != 24*60+1 || !o.Minutes[0].Minute.Equal(at(24*time.Hour).Truncate(time.Minute)) {
			t.Fatalf("%d minutes from %v", len(o.Minutes), o.Minutes[0].Minute)
		}
		want := map[int64]storage.MinuteCounts{}
		want[at(60*time.Minute).Truncate(time.Minute).Unix()] = storage.MinuteCounts{Succeeded: 2, Failed: 1}
		want[at(30*time.Minute).Truncate(time.Minute).Unix()] = storage.MinuteCounts{Failed: 1, DeadLettered: 1}
		want[at(2*time.Minute).Truncate(time.Minute).Unix()] = storage.MinuteCounts{Succeeded: 1}
		for _, m := range o.Minutes {
			w := want[m.Minute.Unix()]
			w.Minute = m.Minute
			if m != w {
				t.Errorf("minute %v: %+v, want %+v", m.Minute, m, w)
			}
		}
		if o.Due != 2 || o.Scheduled != 0 || o.Capped {
			t.Errorf("backlog %d due, %d scheduled (capped %v), want 2 and 0", o.Due, o.Scheduled, o.Capped)
		}
	}
	check()
	// The settled minutes were kept, the last five were not.
	var kept int
	var last time.Time
	if err := db.Pool().QueryRow(ctx, `SELECT count(*), max(minute) FROM attempt_minutes`).Scan(&kept, &last); err != nil {
		t.Fatal(err)
	}
	if !last.Equal(now.Add(-5*time.Minute).Truncate(time.Minute).Add(-time.Minute)) || kept != 24*60-5 {
		t.Errorf("rollup holds %d minutes up to %v", kept, last)
	}
	check() // read back from the rollup: the same counts
}
