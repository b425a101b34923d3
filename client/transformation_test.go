package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/storage"
)

// TestEndpointTransformation: the client sets, tries, shows and clears an
// endpoint's transformation, and one that fails is a validation error on
// the field transformation.
func TestEndpointTransformation(t *testing.T) {
	t.Parallel()
	c := newStack(t, storage.ProjectPlan{}).client(t)
	ctx := context.Background()
	slack := `function handler(w) { w.payload = {text: "Order " + w.payload.data.id + " paid"}; return w }`
	ep, err := c.CreateEndpoint(ctx, client.NewEndpoint{URL: "https://example.com/hooks", Transformation: &slack})
	if err != nil {
		t.Fatal(err)
	}
	if ep.Transformation == nil || *ep.Transformation != slack {
		t.Fatalf("created with transformation %v", ep.Transformation)
	}
	res, err := c.TestTransformation(ctx, ep.ID, client.TransformationTest{Type: "order.paid", Data: json.RawMessage(`{"id":"o_1"}`)})
	if err != nil || !res.Send || res.Body == nil || *res.Body != `{"text":"Order o_1 paid"}` {
		t.Fatalf("tried: %+v, %v", res, err)
	}
	cancel := `function handler(w) { return {cancel: true} }`
	res, err = c.TestTransformation(ctx, ep.ID, client.TransformationTest{Type: "order.paid", Transformation: &cancel})
	if err != nil || res.Send || res.Body != nil {
		t.Fatalf("a cancel tried before saving: %+v, %v", res, err)
	}
	res, err = c.TestTransformation(ctx, ep.ID, client.TransformationTest{Type: "order.paid", Untransformed: true})
	if err != nil || !res.Send || res.URL == nil || *res.URL != "https://example.com/hooks" {
		t.Fatalf("untransformed: %+v, %v", res, err)
	}
	bad := `function handler(w) { return w `
	_, err = c.UpdateEndpoint(ctx, ep.ID, client.EndpointPatch{Transformation: &bad})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Field != "transformation" {
		t.Fatalf("a bad transformation: %v", err)
	}
	ep, err = c.UpdateEndpoint(ctx, ep.ID, client.EndpointPatch{ClearTransformation: true})
	if err != nil || ep.Transformation != nil {
		t.Fatalf("cleared: %v, %v", ep.Transformation, err)
	}
}
