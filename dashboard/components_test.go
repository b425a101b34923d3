package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/a-h/templ"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// renderDoc renders c to a buffer and parses it.
func renderDoc(t *testing.T, c templ.Component) *goquery.Document {
	t.Helper()
	var b bytes.Buffer
	if err := c.Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	doc, err := goquery.NewDocumentFromReader(&b)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// hostile is what an event's data, a receiver's answer or a header may hold.
const hostile = `<img src=x onerror=alert(1)><script>alert(2)</script>`

func TestDeliveryDetailShowsUntrustedContentAsText(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var data bytes.Buffer // as the API stores it: raw <, not \u003c
	enc := json.NewEncoder(&data)
	enc.SetEscapeHTML(false)
	enc.Encode(map[string]string{"note": hostile})
	d := storage.DeliveryDetail{
		Delivery: webhookd.Delivery{ID: "dlv_01", EventID: "evt_01", EndpointID: "ep_01", EventType: "invoice.paid",
			Status: webhookd.DeliveryRetrying, AttemptsCount: 1, LastStatusCode: ptr(500), CreatedAt: now.Add(-time.Hour),
			Attempts: []webhookd.Attempt{{Number: 1, RequestID: "req_01", URL: "https://example.com/hook",
				Trigger: webhookd.TriggerAuto, StatusCode: ptr(500), DurationMS: 42, StartedAt: now.Add(-time.Hour),
				RequestHeaders:  map[string]string{"X-Request-Id": "req_01"},
				ResponseHeaders: map[string]string{"X-Evil": hostile}, ResponseBody: hostile}}},
		ProjectName: "acme", EndpointURL: "https://example.com/hook", EndpointActive: true,
		EventData: json.RawMessage(data.Bytes()),
	}
	doc := renderDoc(t, deliveryDetail(deliveryView{D: d, Payload: prettyJSON(d.EventData), Now: now}))

	if n := doc.Find("img, script").Length(); n != 0 {
		t.Fatalf("%d img/script elements rendered from untrusted content", n)
	}
	if got := doc.Find("#payload").Text(); !strings.Contains(got, hostile) || !strings.Contains(got, "\n  \"note\"") {
		t.Errorf("payload %q: want the pretty JSON holding the markup as text", got)
	}
	if got := doc.Find(".response-body").First().Text(); got != hostile {
		t.Errorf("response body %q, want it as text", got)
	}
	if got := doc.Find(".attempt .request-id").Text(); got != "req_01" {
		t.Errorf("request id %q", got)
	}
	if n := doc.Find(".attempt .trace-id").Length(); n != 0 {
		t.Errorf("an attempt made without tracing shows %d trace ids", n)
	}
	if got := doc.Find("#target-url").Text(); got != "https://example.com/hook" {
		t.Errorf("target url %q", got)
	}
	if got := doc.Find(".attempt .outcome").Text(); got != "HTTP 500" {
		t.Errorf("attempt outcome %q", got)
	}
	form := doc.Find(`form[action="/deliveries/dlv_01/redeliver"]`)
	if form.Length() != 1 || form.AttrOr("method", "") != "post" {
		t.Fatalf("no redeliver form posting to the delivery")
	}
	if _, disabled := form.Find("button").Attr("disabled"); disabled {
		t.Errorf("redeliver disabled for an active endpoint")
	}
	if doc.Find("h1 .badge-retrying").Text() != "retrying" {
		t.Errorf("status badge missing")
	}
	if doc.Find(`meta[http-equiv="refresh"]`).Length() != 0 {
		t.Errorf("refreshes without a pending redelivery")
	}
}

func TestDeliveryDetailDisabledEndpointAndPendingRedelivery(t *testing.T) {
	d := storage.DeliveryDetail{Delivery: webhookd.Delivery{ID: "dlv_02", Status: webhookd.DeliveryDeadLetter},
		EventData: json.RawMessage(`1`)}
	doc := renderDoc(t, deliveryDetail(deliveryView{D: d, Payload: "1",
		Flash: redeliveryFlash[webhookd.CodeEndpointDisabled].text, FlashKind: "error"}))
	if _, disabled := doc.Find("#redeliver").Attr("disabled"); !disabled {
		t.Errorf("redeliver enabled for a disabled endpoint")
	}
	if got := doc.Find("#flash.flash-error").Text(); !strings.Contains(got, "endpoint_disabled") {
		t.Errorf("flash %q: want the error code", got)
	}
	if doc.Find(".attempts li").Length() != 0 || !strings.Contains(doc.Find(".empty").Text(), "No attempt") {
		t.Errorf("no empty state for a delivery without attempts")
	}

	d.EndpointActive, d.PendingRedelivery = true, ptr("req_09")
	doc = renderDoc(t, deliveryDetail(deliveryView{D: d, Payload: "1"}))
	if doc.Find(`meta[http-equiv="refresh"]`).Length() != 1 || !strings.Contains(doc.Find(".actions").Text(), "req_09") {
		t.Errorf("a pending redelivery is not shown and refreshed")
	}
}

func TestDeliveriesListRowsFiltersAndPages(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	rows := []storage.DeliveryRow{
		{Delivery: webhookd.Delivery{ID: "dlv_B", EventID: "evt_B", EventType: "a.b", Status: webhookd.DeliveryDeadLetter,
			AttemptsCount: 1, LastStatusCode: ptr(410), CreatedAt: now.Add(-3 * time.Minute)},
			ProjectName: "acme", EndpointURL: "https://example.com/" + hostile},
		{Delivery: webhookd.Delivery{ID: "dlv_A", EventID: "evt_A", EventType: hostile, Status: webhookd.DeliveryPending,
			CreatedAt: now.Add(-3 * 24 * time.Hour)}, ProjectName: "acme", EndpointURL: "https://example.com/x"},
	}
	f := filter{Status: webhookd.DeliveryDeadLetter, EventType: "a.b"}
	v := deliveriesView{Filter: f, Rows: rows, Now: now, Window: "14 days",
		Projects: []webhookd.Project{{ID: "prj_1", Name: "acme"}}, NextURL: f.query("dlv_A"), FirstURL: f.query("")}
	doc := renderDoc(t, deliveriesList(v))

	if doc.Find("img, script").Length() != 0 {
		t.Fatal("markup from a URL or event type was rendered as HTML")
	}
	trs := doc.Find("tbody tr")
	if trs.Length() != 2 {
		t.Fatalf("%d rows", trs.Length())
	}
	first := trs.First()
	for sel, want := range map[string]string{
		`td[data-label="Delivery"] a.delivery-id`: "dlv_B", `td[data-label="Delivery"] .event-id`: "evt_B", `td[data-label="Type"]`: "a.b",
		`td[data-label="Status"] .badge-dead_letter`: "dead letter", `td[data-label="Attempts"]`: "1",
		`td[data-label="Last HTTP"]`: "410",
	} {
		if got := strings.TrimSpace(first.Find(sel).Text()); got != want {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	if href := first.Find(`td[data-label="Delivery"] a`).AttrOr("href", ""); href != "/deliveries/dlv_B" {
		t.Errorf("detail link %q", href)
	}
	if got := first.Find(`td[data-label="Time"]`).Text(); !strings.Contains(got, "2026-11-30 11:57:00") || !strings.Contains(got, "3 min ago") {
		t.Errorf("time cell %q", got)
	}
	if !strings.Contains(trs.Last().Find(`td[data-label="Type"]`).Text(), hostile) {
		t.Errorf("hostile event type not shown as text")
	}
	if doc.Find(`#f-status option[selected]`).AttrOr("value", "") != webhookd.DeliveryDeadLetter ||
		doc.Find("#f-event-type").AttrOr("value", "") != "a.b" {
		t.Errorf("filters not kept in the form")
	}
	if href := doc.Find("#next").AttrOr("href", ""); href != "/?cursor=dlv_A&event_type=a.b&status=dead_letter" {
		t.Errorf("next page %q: want the filters and the cursor", href)
	}
	if href := doc.Find("#newest").AttrOr("href", ""); href != "/?event_type=a.b&status=dead_letter" {
		t.Errorf("newest %q", href)
	}

	empty := renderDoc(t, deliveriesList(deliveriesView{Window: "14 days"}))
	if !strings.Contains(empty.Find(".empty").Text(), "POST /v1/events") || empty.Find("#next, #newest").Length() != 0 {
		t.Errorf("empty state without filters: %q", empty.Find(".empty").Text())
	}
	filtered := renderDoc(t, deliveriesList(deliveriesView{Filter: f, Window: "14 days"}))
	if !strings.Contains(filtered.Find(".empty").Text(), "Clear the filters") {
		t.Errorf("empty state with filters: %q", filtered.Find(".empty").Text())
	}
}

func TestLoginFormKeepsNextAndSaysWhy(t *testing.T) {
	doc := renderDoc(t, loginForm("/deliveries/dlv_1", "That is not the admin token."))
	if doc.Find(`input[name="next"]`).AttrOr("value", "") != "/deliveries/dlv_1" ||
		doc.Find(`input[name="token"]`).AttrOr("type", "") != "password" ||
		!strings.Contains(doc.Find(`[role="alert"]`).Text(), "not the admin token") {
		t.Fatal("login form lacks next, a password field or the message")
	}
}

func TestLocalPathNeverLeavesTheSite(t *testing.T) {
	for in, want := range map[string]string{"/": "/", "/deliveries/dlv_1?x=1": "/deliveries/dlv_1?x=1",
		"//evil.example": "/", "/\\evil.example": "/", "https://evil.example/": "/", "": "/", "javascript:alert(1)": "/"} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDeliveryDetailShowsAnAttemptsTraceID: an attempt sent in a trace
// shows its trace id, to look it up in a tracing tool.
func TestDeliveryDetailShowsAnAttemptsTraceID(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	d := storage.DeliveryDetail{Delivery: webhookd.Delivery{ID: "dlv_03", Status: webhookd.DeliverySucceeded,
		Attempts: []webhookd.Attempt{
			{Number: 1, RequestID: "req_01", StatusCode: ptr(500), StartedAt: now, TraceID: "0af7651916cd43dd8448eb211c80319c"},
			{Number: 2, RequestID: "req_02", StatusCode: ptr(200), StartedAt: now}}},
		EndpointActive: true, EventData: json.RawMessage(`1`)}
	doc := renderDoc(t, deliveryDetail(deliveryView{D: d, Payload: "1", Now: now}))
	attempts := doc.Find(".attempt")
	if got := attempts.Eq(0).Find(".trace-id").Text(); got != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("first attempt's trace id %q", got)
	}
	if attempts.Eq(1).Find(".trace-id").Length() != 0 {
		t.Errorf("an attempt without a trace id shows one")
	}
}
