package storage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestTraceGoesFromEventToAttempt: the traceparent an event is written
// with is what its delivery's claim reads (the parent of the attempt's
// span), and the trace id an attempt is recorded with is what the
// delivery shows; an event written without one has none, and neither has
// its attempt, wherever it stands among traced ones in one write.
func TestTraceGoesFromEventToAttempt(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx, s := context.Background(), db.Store()
	project := newProject(t, db)
	if _, err := s.CreateEndpoint(ctx, project, storage.NewEndpoint{URL: "http://127.0.0.1:9/", Secret: "whsec_AAAA"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	now := time.Now().UTC()
	evs, err := s.CreateEvents(ctx, project, []storage.NewEvent{{Type: "a", Data: json.RawMessage("0")},
		{Type: "a", Data: json.RawMessage("1"), TraceParent: tp}, {Type: "a", Data: json.RawMessage("2")}}, now,
		func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	before, traced, untraced := evs[0].Deliveries[0].ID, evs[1].Deliveries[0].ID, evs[2].Deliveries[0].ID
	ls, err := db.ClaimDeliveries(ctx, now, now.Add(time.Minute), []storage.Claim{
		{DeliveryID: untraced, Token: storage.NewRequestID()}, {DeliveryID: traced, Token: storage.NewRequestID()},
		{DeliveryID: before, Token: storage.NewRequestID()}})
	if err != nil {
		t.Fatal(err)
	}
	if ls[0].TraceParent != "" || ls[1].TraceParent != tp || ls[2].TraceParent != "" {
		t.Fatalf("claims read trace parents %q, %q and %q, want none, %q and none", ls[0].TraceParent, ls[1].TraceParent,
			ls[2].TraceParent, tp)
	}
	code := 200
	var rs []storage.Record
	for i, traceID := range []string{"", "0af7651916cd43dd8448eb211c80319c", ""} {
		a := webhookd.Attempt{DeliveryID: ls[i].Delivery.ID, Number: 1, RequestID: ls[i].Token, URL: "http://127.0.0.1:9/",
			Trigger: webhookd.TriggerAuto, StatusCode: &code, StartedAt: now, TraceID: traceID}
		rs = append(rs, storage.Record{Lease: &ls[i], Attempt: &a,
			Transition: storage.Transition{Status: webhookd.DeliverySucceeded, Auto: true, Now: now}})
	}
	if applied, _, err := db.RecordAttempts(ctx, rs); err != nil || !applied[0] || !applied[1] || !applied[2] {
		t.Fatalf("records applied %v, %v", applied, err)
	}
	for id, want := range map[string]string{before: "", traced: "0af7651916cd43dd8448eb211c80319c", untraced: ""} {
		d, err := s.GetDelivery(ctx, project, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Attempts) != 1 || d.Attempts[0].TraceID != want {
			t.Fatalf("delivery %s: attempts %+v, want one with trace id %q", id, d.Attempts, want)
		}
	}
}
