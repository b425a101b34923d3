package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestClaimFlushFailingAfterItsCommitStrandsNothing: a claim flush whose
// statement committed and whose answer was then lost is flushed again one
// claim at a time, as the batcher does after any failed flush; each claim
// must get its lease, not find it taken by itself until it runs out.
func TestClaimFlushFailingAfterItsCommitStrandsNothing(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	s := db.Store()
	_, p, err := s.CreateAPIKey(ctx, "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: "http://127.0.0.1:9/", Secret: "whsec_AAAA"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	evs, err := s.CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")},
		{Type: "a", Data: json.RawMessage("2")}, {Type: "a", Data: json.RawMessage("3")}}, time.Now(), func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var lost atomic.Bool
	claims := newBatcher(len(evs), time.Minute, 10*time.Second, func(ctx context.Context, cs []storage.Claim) ([]storage.Lease, error) {
		now := time.Now()
		ls, err := db.ClaimDeliveries(ctx, now, now.Add(time.Minute), cs)
		if err == nil && len(cs) > 1 && lost.CompareAndSwap(false, true) {
			return nil, errors.New("connection lost after the commit") // the first full flush
		}
		return ls, err
	})
	defer claims.Stop()
	var wg sync.WaitGroup
	for _, ev := range evs {
		wg.Go(func() {
			l, err := claims.Do(ctx, storage.Claim{DeliveryID: ev.Deliveries[0].ID, Token: storage.NewRequestID()})
			if err != nil || !l.Held {
				t.Errorf("claim of %s after its flush failed: held %v, other's lease until %v, %v",
					ev.Deliveries[0].ID, l.Held, l.OtherUntil, err)
			}
		})
	}
	wg.Wait()
	if !lost.Load() {
		t.Fatal("the three claims never went in one flush")
	}
}
