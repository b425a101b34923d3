package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestPortalLinkIsSpentOnce: of many concurrent openings of one link,
// exactly one gets the project; later ones, expired and unknown links are
// told apart.
func TestPortalLinkIsSpentOnce(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx, s, now := context.Background(), db.Store(), time.Now()
	project, _ := oneEndpoint(t, db)
	token, err := s.CreatePortalLink(ctx, project, now, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	opened, spent := 0, 0
	for range 8 {
		wg.Go(func() {
			p, err := s.SpendPortalLink(ctx, token, now)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && p.ID == project && p.Name == "p":
				opened++
			case errors.Is(err, storage.ErrPortalLinkSpent):
				spent++
			default:
				t.Errorf("open: %+v %v", p, err)
			}
		})
	}
	wg.Wait()
	if opened != 1 || spent != 7 {
		t.Fatalf("%d opened, %d spent; want 1 and 7", opened, spent)
	}
	old, _ := s.CreatePortalLink(ctx, project, now.Add(-time.Hour), now.Add(-time.Minute))
	if _, err := s.SpendPortalLink(ctx, old, now); !errors.Is(err, storage.ErrPortalLinkExpired) {
		t.Fatalf("expired link: %v", err)
	}
	for _, bad := range []string{"wpl_nope", "", "x", token + "x"} {
		if _, err := s.SpendPortalLink(ctx, bad, now); !errors.Is(err, storage.ErrPortalLinkUnknown) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

// TestProjectOverviewCountsOneProject: the portal's chart counts its own
// project's attempts, dead letters and backlog, none of another's.
func TestProjectOverviewCountsOneProject(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx, s := context.Background(), db.Store()
	now := time.Now().UTC()
	mine, mk := oneEndpoint(t, db)
	_, other, err := s.CreateAPIKey(ctx, "other", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateEndpoint(ctx, other.ID, storage.NewEndpoint{URL: "http://127.0.0.1:9/o", Secret: "whsec_AAAA"}, now); err != nil {
		t.Fatal(err)
	}
	mkOther := func() string {
		evs, err := s.CreateEvents(ctx, other.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}}, now.Add(-time.Hour),
			func(int) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].Deliveries[0].ID
	}
	ok, bad := 200, 500
	at := now.Add(-30 * time.Minute)
	testenv.Record(t, db, mk(now.Add(-time.Hour)), webhookd.Attempt{StatusCode: &ok, StartedAt: at},
		storage.Transition{Status: webhookd.DeliverySucceeded, Now: at})
	testenv.Record(t, db, mk(now.Add(-time.Hour)), webhookd.Attempt{StatusCode: &bad, StartedAt: at},
		storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonExhausted, Now: at})
	mk(now.Add(-time.Hour)) // waiting, due
	for range 3 {
		testenv.Record(t, db, mkOther(), webhookd.Attempt{StatusCode: &bad, StartedAt: at},
			storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonExhausted, Now: at})
	}
	mkOther()
	o, err := s.ProjectOverview(ctx, mine, now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var sum storage.MinuteCounts
	for _, m := range o.Minutes {
		sum.Succeeded, sum.Failed, sum.DeadLettered = sum.Succeeded+m.Succeeded, sum.Failed+m.Failed, sum.DeadLettered+m.DeadLettered
	}
	if len(o.Minutes) != 24*60+1 || sum.Succeeded != 1 || sum.Failed != 1 || sum.DeadLettered != 1 || o.Due != 1 || o.Scheduled != 0 {
		t.Fatalf("%d minutes, totals %+v, backlog %d due %d scheduled", len(o.Minutes), sum, o.Due, o.Scheduled)
	}
}
