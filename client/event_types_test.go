package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/storage"
)

func TestEventTypeCatalogAndPortalLinks(t *testing.T) {
	t.Parallel()
	s := newStack(t, storage.ProjectPlan{})
	c := newClient(t, s, fast)
	ctx := context.Background()

	schema := map[string]any{"type": "object", "required": []string{"amount"},
		"properties": map[string]any{"amount": map[string]any{"type": "integer"}}}
	et, err := c.CreateEventType(ctx, client.NewEventType{Name: "invoice.paid", Description: "Paid.", Schema: schema,
		Example: map[string]any{"amount": 3}, Validate: true})
	if err != nil || !et.Validate || et.Archived || string(et.Example) != `{"amount":3}` {
		t.Fatalf("created %+v %v", et, err)
	}
	_, err = c.CreateEventType(ctx, client.NewEventType{Name: "x", Schema: schema, Example: map[string]any{}})
	var e *client.Error
	if !errors.As(err, &e) || e.Field != "example" {
		t.Fatalf("bad example: %v", err)
	}
	_, err = c.SendEvent(ctx, client.NewEvent{Type: "invoice.paid", Data: map[string]any{"amount": "3"}})
	if !errors.As(err, &e) || !errors.Is(err, client.ErrValidationFailed) || e.Field != "data.amount" {
		t.Fatalf("event against the schema: %v", err)
	}
	off := false
	if et, err = c.UpdateEventType(ctx, "invoice.paid", client.EventTypePatch{Validate: &off, ClearExample: true}); err != nil ||
		et.Validate || string(et.Example) != "null" {
		t.Fatalf("patched %+v %v", et, err)
	}
	if _, err := c.SendEvent(ctx, client.NewEvent{Type: "invoice.paid", Data: map[string]any{"amount": "3"}}); err != nil {
		t.Fatalf("not validated any more: %v", err)
	}
	if et, err = c.ArchiveEventType(ctx, "invoice.paid"); err != nil || !et.Archived {
		t.Fatalf("archived %+v %v", et, err)
	}
	var names []string
	for et, err := range c.EventTypes(ctx, true, 1) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, et.Name)
	}
	if strings.Join(names, ",") != "invoice.paid" {
		t.Fatalf("listed %v", names)
	}
	if _, err := c.EventType(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("EventType(nope): %v", err)
	}

	link, err := c.CreatePortalSession(ctx, time.Hour)
	if err != nil || !strings.Contains(link.URL, "/portal/open/wpl_") || time.Until(link.ExpiresAt) < 59*time.Minute {
		t.Fatalf("portal link %+v %v", link, err)
	}
}
