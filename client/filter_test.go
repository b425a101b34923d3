package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/storage"
)

// TestEndpointFilter: the client sets, shows and clears an endpoint's
// filter, and a filter that does not check is a validation error naming
// its path.
func TestEndpointFilter(t *testing.T) {
	t.Parallel()
	c := newStack(t, storage.ProjectPlan{}).client(t)
	ctx := context.Background()
	ep, err := c.CreateEndpoint(ctx, client.NewEndpoint{URL: "https://example.com/hooks",
		Filter: json.RawMessage(`{"data.status":"shipped"}`)})
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(ep.Filter, &f); err != nil || f["data.status"] != "shipped" {
		t.Fatalf("created with filter %s (%v)", ep.Filter, err)
	}
	_, err = c.UpdateEndpoint(ctx, ep.ID, client.EndpointPatch{Filter: json.RawMessage(`{"data.total":{"$gt":[1]}}`)})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Field != "filter.data.total" {
		t.Fatalf("a bad filter: %v", err)
	}
	ep, err = c.UpdateEndpoint(ctx, ep.ID, client.EndpointPatch{ClearFilter: true})
	if err != nil || string(ep.Filter) != "null" {
		t.Fatalf("cleared: %s, %v", ep.Filter, err)
	}
}
