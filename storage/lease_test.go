package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestClaimAgainWithItsTokenHoldsTheLease: claims made again with the
// tokens of a call that committed (its answer lost on the way back) hold
// their leases as the first call did; a claim with another token is still
// refused while they are held.
func TestClaimAgainWithItsTokenHoldsTheLease(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	_, mk := oneEndpoint(t, db)
	now := time.Now().UTC()
	cs := []storage.Claim{{DeliveryID: mk(now), Token: storage.NewRequestID()},
		{DeliveryID: mk(now), Token: storage.NewRequestID()}}
	for try := 1; try <= 2; try++ {
		ls, err := db.ClaimDeliveries(ctx, now, now.Add(time.Minute), cs)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range ls {
			if !l.Held || l.Token != cs[i].Token {
				t.Fatalf("claim %d of call %d: held %v with token %s, want held with %s", i, try, l.Held, l.Token, cs[i].Token)
			}
		}
	}
	ls, err := db.ClaimDeliveries(ctx, now, now.Add(time.Minute),
		[]storage.Claim{{DeliveryID: cs[0].DeliveryID, Token: storage.NewRequestID()}})
	if err != nil || ls[0].Held || ls[0].OtherUntil == nil {
		t.Fatalf("a claim with another token: %+v, %v; want refused while the lease is held", ls[0], err)
	}
}
