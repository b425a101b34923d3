package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/storage"
)

// TestRelayEndpointMakesThenReuses: the first call makes relay://NAME, the
// next reuse it, taking the event types asked for (none: every type) and
// enabling it again.
func TestRelayEndpointMakesThenReuses(t *testing.T) {
	t.Parallel()
	c := newStack(t, storage.ProjectPlan{}).client(t)
	ctx := context.Background()
	if _, err := c.CreateEndpoint(ctx, client.NewEndpoint{URL: "https://example.com/hooks"}); err != nil {
		t.Fatal(err)
	}
	ep, created, err := c.RelayEndpoint(ctx, "laptop", []string{"invoice.paid"})
	if err != nil || !created || ep.URL != "relay://laptop" || !slices.Equal(ep.EventTypes, []string{"invoice.paid"}) {
		t.Fatalf("first: %+v, created %v, %v", ep, created, err)
	}
	again, created, err := c.RelayEndpoint(ctx, "laptop", []string{"invoice.paid"})
	if err != nil || created || again.ID != ep.ID || again.Version != ep.Version {
		t.Fatalf("same again: %+v, created %v, %v; want it unchanged", again, created, err)
	}
	off := "disabled"
	if _, err := c.UpdateEndpoint(ctx, ep.ID, client.EndpointPatch{Status: &off}); err != nil {
		t.Fatal(err)
	}
	again, created, err = c.RelayEndpoint(ctx, "laptop", nil)
	if err != nil || created || again.ID != ep.ID || again.Status != "active" || len(again.EventTypes) != 0 {
		t.Fatalf("every type, after a disable: %+v, created %v, %v", again, created, err)
	}
	other, created, err := c.RelayEndpoint(ctx, "other", nil)
	if err != nil || !created || other.ID == ep.ID {
		t.Fatalf("another name: %+v, created %v, %v", other, created, err)
	}
	if _, _, err := c.RelayEndpoint(ctx, "not a name", nil); !errors.Is(err, client.ErrValidationFailed) {
		t.Fatalf("a bad name: %v, want validation_failed", err)
	}
}
