package client_test

import (
	"context"
	"testing"

	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/storage"
)

// TestDeliveryWaitingReason: a delivery that waits carries its reason, read
// one by one and in the list; one that nothing holds back has none.
func TestDeliveryWaitingReason(t *testing.T) {
	t.Parallel()
	s := newStack(t, storage.ProjectPlan{})
	c := newClient(t, s)
	ctx := context.Background()
	ep, err := c.CreateEndpoint(ctx, client.NewEndpoint{URL: "http://127.0.0.1:9/hook", EventTypes: []string{"order.paid"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 {
		ev, err := c.SendEvent(ctx, client.NewEvent{Type: "order.paid", Data: map[string]any{}, EndpointIDs: []string{ep.ID}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ev.Deliveries[0].ID)
	}
	if _, err := s.db.Pool().Exec(ctx, `UPDATE deliveries SET waiting_reason = 'rate_limit' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}

	d, err := c.Delivery(ctx, ids[0])
	if err != nil || d.WaitingReason == nil || *d.WaitingReason != "rate_limit" {
		t.Fatalf("Delivery(%s) = %+v, %v; want waiting_reason rate_limit", ids[0], d, err)
	}
	got := map[string]*string{}
	for d, err := range c.Deliveries(ctx, client.DeliveryFilter{EndpointID: ep.ID}) {
		if err != nil {
			t.Fatal(err)
		}
		got[d.ID] = d.WaitingReason
	}
	if len(got) != 2 || got[ids[0]] == nil || *got[ids[0]] != "rate_limit" || got[ids[1]] != nil {
		t.Fatalf("listed waiting reasons %v", got)
	}
}
