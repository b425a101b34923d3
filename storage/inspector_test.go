package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// Inspector attempts share the number of the next real attempt, and
// several may share it; two real attempts never share one.
func TestInspectorAttemptsShareNumbersRealOnesDoNot(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	_, mk := oneEndpoint(t, db)
	id := mk(time.Now())
	ok := 200
	inspect := func() error {
		return db.RecordInspectorAttempt(ctx, webhookd.Attempt{DeliveryID: id, Number: 1, RequestID: storage.NewRequestID(),
			URL: "http://127.0.0.1/in/bin_inspector", Trigger: webhookd.TriggerInspector, StatusCode: &ok, StartedAt: time.Now()})
	}
	if err := inspect(); err != nil {
		t.Fatal(err)
	}
	if err := inspect(); err != nil {
		t.Fatalf("a second inspector attempt with the same number: %v", err)
	}
	real := testenv.Record(t, db, id, webhookd.Attempt{StatusCode: &ok}, storage.Transition{Status: webhookd.DeliverySucceeded})
	if real.Number != 1 {
		t.Fatalf("the real attempt is number %d, want 1", real.Number)
	}
	_, err := db.Pool().Exec(ctx, `INSERT INTO attempts (delivery_id, number, request_id, url, trigger, status_code, duration_ms, started_at)
		VALUES ($1, 1, $2, 'http://x', 'manual', 200, 1, now())`, id, storage.NewRequestID())
	if err == nil {
		t.Fatal("a second real attempt number 1 was accepted")
	}
	if err := db.RecordInspectorAttempt(ctx, webhookd.Attempt{DeliveryID: id, Number: 2, RequestID: storage.NewRequestID(),
		Trigger: webhookd.TriggerManual}); err == nil {
		t.Error("RecordInspectorAttempt took a manual attempt")
	}
	d, err := db.Store().DashboardDelivery(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d.AttemptsCount != 1 || len(d.Attempts) != 3 || d.Attempts[2].Trigger != webhookd.TriggerAuto {
		t.Errorf("%d counted, %d logged, last %+v", d.AttemptsCount, len(d.Attempts), d.Attempts[len(d.Attempts)-1])
	}
	if _, err := db.InspectionLease(ctx, "dlv_nope"); webhookd.ErrorCode(err) != webhookd.CodeNotFound {
		t.Errorf("inspection of a missing delivery: %v", err)
	}
}
