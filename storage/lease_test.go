package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
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

// TestUnreadableSecretFailsItsClaimAlone: a claim whose endpoint's secret
// is sealed with a key this process does not hold (left out of
// WEBHOOKD_ENCRYPTION_KEY during a rotation) holds its lease and says so;
// the claims beside it in the call are as they would be alone.
func TestUnreadableSecretFailsItsClaimAlone(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx, s := context.Background(), db.Store()
	_, p, err := s.CreateAPIKey(ctx, "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	var eps []string
	for range 2 {
		ep, err := s.CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: "http://127.0.0.1:9/", Secret: "whsec_AAAA"}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep.ID)
	}
	if _, err := db.Pool().Exec(ctx, `UPDATE endpoints SET secret = 'whenc:gone:AAAA' WHERE id = $1`, eps[1]); err != nil {
		t.Fatal(err)
	}
	evs, err := s.CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}}, time.Now(),
		func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var cs []storage.Claim
	for _, d := range evs[0].Deliveries {
		cs = append(cs, storage.Claim{DeliveryID: d.ID, Token: storage.NewRequestID()})
	}
	now := time.Now().UTC()
	ls, err := db.ClaimDeliveries(ctx, now, now.Add(time.Minute), cs)
	if err != nil {
		t.Fatalf("a claim beside an unreadable secret: %v", err)
	}
	for _, l := range ls {
		unreadable := l.Delivery.EndpointID == eps[1]
		switch {
		case !l.Held:
			t.Errorf("claim of %s not held", l.Delivery.ID)
		case unreadable && !errors.Is(l.SecretErr, storage.ErrSecretUnreadable):
			t.Errorf("the unreadable secret's claim: %v, want ErrSecretUnreadable", l.SecretErr)
		case !unreadable && (l.SecretErr != nil || l.Endpoint.Secret != "whsec_AAAA"):
			t.Errorf("the other claim: secret %q, %v", l.Endpoint.Secret, l.SecretErr)
		}
	}
}

// TestTwoRecordsOfOneDeliveryInOneCall: the record of an attempt whose
// lease ran out, in one call with the record of the attempt that holds the
// lease now, is not applied, says so, and logs nothing.
func TestTwoRecordsOfOneDeliveryInOneCall(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	projectID, mk := oneEndpoint(t, db)
	now := time.Now().UTC()
	id := mk(now)
	claim := func(at time.Time) storage.Lease {
		ls, err := db.ClaimDeliveries(ctx, at, at.Add(time.Minute), []storage.Claim{{DeliveryID: id, Token: storage.NewRequestID()}})
		if err != nil || !ls[0].Held {
			t.Fatalf("claim: %+v, %v", ls, err)
		}
		return ls[0]
	}
	stale := claim(now)
	holder := claim(now.Add(2 * time.Minute)) // after the first lease ran out
	code := 200
	a := webhookd.Attempt{DeliveryID: id, Number: 1, RequestID: stale.Token, URL: "http://127.0.0.1:9/", Trigger: "auto",
		StatusCode: &code, StartedAt: now}
	ok, _, err := db.RecordAttempts(ctx, []storage.Record{
		{Lease: &stale, Attempt: &a, Transition: storage.Transition{Status: webhookd.DeliverySucceeded, Auto: true, Now: now}},
		// The holder found the endpoint disabled: a move without an attempt.
		{Lease: &holder, Transition: storage.Transition{Status: webhookd.DeliveryDeadLetter,
			DeadLetterReason: webhookd.ReasonEndpointDisabled, Now: now}},
	})
	if err != nil || ok[0] || !ok[1] {
		t.Fatalf("applied %v, %v; want only the holder's record", ok, err)
	}
	d, err := db.Store().GetDelivery(ctx, projectID, id)
	if err != nil || d.Status != webhookd.DeliveryDeadLetter || len(d.Attempts) != 0 {
		t.Fatalf("delivery %s with %d attempts (%v); want the holder's dead letter and no attempt logged",
			d.Status, len(d.Attempts), err)
	}
}
