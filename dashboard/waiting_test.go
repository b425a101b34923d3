package dashboard

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

func TestEveryWaitingReasonHasWording(t *testing.T) {
	for _, r := range webhookd.WaitingReasons {
		if waitingWording[r] == "" {
			t.Errorf("no wording for waiting reason %q", r)
		}
	}
	if got := waitingLabel("new_reason"); got != "new reason" {
		t.Errorf("unknown reason worded %q, want it as it is", got)
	}
}

func TestWaitingReasonBesideTheNextAttempt(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	next := now.Add(2 * time.Minute)
	d := storage.DeliveryDetail{Delivery: webhookd.Delivery{ID: "dlv_01", Status: webhookd.DeliveryPending,
		NextAttemptAt: &next, WaitingReason: webhookd.WaitingCircuitOpen}, EventData: []byte(`1`)}
	doc := renderDoc(t, deliveryDetail(deliveryView{D: d, Payload: "1", Now: now}))
	dd := doc.Find("#next-attempt")
	if got := dd.Find(".waiting").Text(); got != "waiting for its circuit's next probe" {
		t.Errorf("waiting wording %q", got)
	}
	if got := dd.Text(); !strings.Contains(got, "2026-11-30 12:02:00") || !strings.Contains(got, "2 min from now") {
		t.Errorf("next attempt %q: want its time beside the reason", got)
	}
	d.WaitingReason = ""
	doc = renderDoc(t, deliveryDetail(deliveryView{D: d, Payload: "1", Now: now}))
	if doc.Find("#next-attempt").Length() != 1 || doc.Find(".waiting").Length() != 0 {
		t.Errorf("a delivery nothing holds back: %q", doc.Find("#next-attempt").Text())
	}

	var rows []storage.DeliveryRow
	for _, r := range append([]string{""}, webhookd.WaitingReasons...) {
		rows = append(rows, storage.DeliveryRow{Delivery: webhookd.Delivery{ID: "dlv_" + r,
			Status: webhookd.DeliveryRetrying, NextAttemptAt: &next, WaitingReason: r, CreatedAt: now}})
	}
	list := renderDoc(t, deliveriesList(deliveriesView{Rows: rows, Now: now, Window: "14 days"}))
	for _, r := range rows {
		cell := list.Find(`tr[data-delivery-id="` + r.ID + `"] td[data-label="Status"]`)
		got := strings.Join(strings.Fields(cell.Find(".waiting").Text()), " ")
		want := ""
		if r.WaitingReason != "" {
			want = waitingWording[r.WaitingReason] + " · 2 min from now"
		}
		if got != want {
			t.Errorf("%s: status cell says %q, want %q", r.ID, got, want)
		}
	}
}

// TestWaitingReasonShownToOperatorAndPortal: a delivery that PostgreSQL
// says waits for its endpoint's concurrency shows why, on its page and in
// the list, to the operator and in its project's portal.
func TestWaitingReasonShownToOperatorAndPortal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	_, ids := f.seed("acme", 2, "invoice.paid")
	if _, err := f.db.Pool().Exec(context.Background(), `UPDATE deliveries SET waiting_reason = 'endpoint_busy',
		next_attempt_at = now() + interval '10 minutes' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	const wording = "held back: endpoint at its concurrency limit"
	admin := f.client()
	f.login(admin)
	portal := noCookies()
	base := f.openPortal(portal, f.portalLink("acme", time.Hour))

	for _, c := range []struct {
		who    string
		client *http.Client
		base   string
	}{{"operator", admin, ""}, {"portal", portal, base}} {
		resp, body := f.do(c.client, "GET", c.base+"/deliveries/"+ids[0], nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: delivery page %d", c.who, resp.StatusCode)
		}
		dd := parseHTML(t, body).Find("#next-attempt")
		if got := dd.Find(".waiting").Text(); got != wording || !strings.Contains(dd.Text(), "from now") {
			t.Errorf("%s: delivery page's next attempt %q, want %q beside its time", c.who, dd.Text(), wording)
		}
		resp, body = f.do(c.client, "GET", c.base+"/", nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: list %d", c.who, resp.StatusCode)
		}
		doc := parseHTML(t, body)
		if got := doc.Find(`tr[data-delivery-id="` + ids[0] + `"] .waiting`).Text(); !strings.Contains(got, wording) {
			t.Errorf("%s: waiting row says %q, want %q", c.who, got, wording)
		}
		if n := doc.Find(`tr[data-delivery-id="` + ids[1] + `"] .waiting`).Length(); n != 0 {
			t.Errorf("%s: a delivery nothing holds back shows a waiting reason", c.who)
		}
	}
}
