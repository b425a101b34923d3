package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

func TestEndpointsListDisableEnableAndTestEvent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep, ids := f.seed("acme", 1, "invoice.paid")
	f.deadLetter(ids[0], webhookd.ReasonClientError)
	c := f.client()
	f.login(c)

	row := func() *goquery.Selection {
		t.Helper()
		_, body := f.do(c, "GET", "/endpoints", nil, nil)
		doc, _ := goquery.NewDocumentFromReader(strings.NewReader(body))
		return doc.Find(`tr[data-endpoint-id="` + ep + `"]`)
	}
	r := row()
	if r.Length() != 1 || r.AttrOr("data-status", "") != "active" || !strings.Contains(r.Find(".endpoint-url").Text(), "/acme") {
		t.Fatalf("endpoint row missing or wrong")
	}
	if got := strings.Join(strings.Fields(r.Find("td.health").Text()), " "); got != "0% delivered 0 ok · 1 dead · 0 waiting" {
		t.Errorf("24 h health %q", got)
	}
	if r.Find(".badge-dead_letter").Text() != "dead letter" || r.Find(`a[href="/deliveries/`+ids[0]+`"]`).Text() != "400" {
		t.Errorf("latest delivery not shown: %q", r.Find(`td[data-label="Latest"]`).Text())
	}

	// From another origin: refused, the endpoint stays active.
	resp, _ := f.do(c, "POST", "/endpoints/"+ep+"/status", url.Values{"status": {"disabled"}},
		map[string]string{"Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusForbidden || row().AttrOr("data-status", "") != "active" {
		t.Fatalf("cross-origin disable: %d", resp.StatusCode)
	}

	resp, _ = f.do(c, "POST", "/endpoints/"+ep+"/status", url.Values{"status": {"disabled"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/endpoints?done=disabled" {
		t.Fatalf("disable: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	e, _ := f.db.Store().DashboardEndpoint(context.Background(), ep)
	if e.Status != webhookd.EndpointDisabled || e.DisabledReason == nil || *e.DisabledReason != webhookd.DisabledManual {
		t.Fatalf("after disable: %s %v", e.Status, e.DisabledReason)
	}
	if _, disabled := row().Find(".send-test").Attr("disabled"); !disabled {
		t.Errorf("send test offered for a disabled endpoint")
	}
	resp, _ = f.do(c, "POST", "/endpoints/"+ep+"/test", url.Values{}, nil)
	if resp.Header.Get("Location") != "/endpoints?done=test_disabled" {
		t.Fatalf("test event to a disabled endpoint: %q", resp.Header.Get("Location"))
	}

	if row().Find(`.replay-outage input[name="replay_dead_letters"]`).Length() != 1 {
		t.Errorf("enabling does not offer to replay the outage's dead letters")
	}
	// Enabled with the outage's dead letters replayed: one job, whose progress shows.
	resp, _ = f.do(c, "POST", "/endpoints/"+ep+"/status", url.Values{"status": {"active"}, "replay_dead_letters": {"1"}}, nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/jobs?id=job_") {
		t.Fatalf("enable and replay: %d %q", resp.StatusCode, loc)
	}
	var params string
	if err := f.db.Pool().QueryRow(context.Background(), `SELECT params::text FROM jobs`).Scan(&params); err != nil ||
		!strings.Contains(params, ep) {
		t.Fatalf("replay job params %q (%v), want endpoint %s", params, err, ep)
	}
	if row().AttrOr("data-status", "") != "active" {
		t.Fatalf("not enabled")
	}
	resp, _ = f.do(c, "POST", "/endpoints/"+ep+"/test", url.Values{}, nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/deliveries/dlv_") {
		t.Fatalf("test event: %d %q", resp.StatusCode, loc)
	}
	d, err := f.db.Store().DashboardDelivery(context.Background(), strings.TrimPrefix(loc, "/deliveries/"))
	if err != nil || d.EventType != webhookd.TestEventType || d.EndpointID != ep {
		t.Fatalf("test delivery %+v (%v)", d.Delivery, err)
	}
	if resp, _ := f.do(c, "POST", "/endpoints/ep_nope/status", url.Values{"status": {"active"}}, nil); resp.Header.Get("Location") != "/endpoints?done=not_found" {
		t.Errorf("unknown endpoint: %q", resp.Header.Get("Location"))
	}
}

func TestSecretShownOnlyOnClickAndRotated(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep, _ := f.seed("acme", 1, "invoice.paid")
	c := f.client()
	f.login(c)
	e, _ := f.db.Store().DashboardEndpoint(context.Background(), ep)

	_, list := f.do(c, "GET", "/endpoints", nil, nil)
	if strings.Contains(list, "whsec_") {
		t.Fatal("the endpoints list shows a secret")
	}
	resp, body := f.do(c, "POST", "/endpoints/"+ep+"/secret", url.Values{}, nil)
	doc, _ := goquery.NewDocumentFromReader(strings.NewReader(body))
	if resp.StatusCode != http.StatusOK || doc.Find("#secret").Text() != e.Secret || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("reveal: %d, secret %q", resp.StatusCode, doc.Find("#secret").Text())
	}
	if doc.Find("#previous-secret").Length() != 0 {
		t.Errorf("a previous secret shown without a rotation")
	}
	// A cross-origin rotation is refused and the secret stays.
	resp, _ = f.do(c, "POST", "/endpoints/"+ep+"/rotate-secret", url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if after, _ := f.db.Store().DashboardEndpoint(context.Background(), ep); resp.StatusCode != http.StatusForbidden || after.Secret != e.Secret {
		t.Fatalf("cross-origin rotate: %d", resp.StatusCode)
	}
	resp, body = f.do(c, "POST", "/endpoints/"+ep+"/rotate-secret", url.Values{}, nil)
	doc, _ = goquery.NewDocumentFromReader(strings.NewReader(body))
	after, _ := f.db.Store().DashboardEndpoint(context.Background(), ep)
	if resp.StatusCode != http.StatusOK || after.Secret == e.Secret || doc.Find("#secret").Text() != after.Secret ||
		doc.Find("#previous-secret").Text() != e.Secret || !strings.Contains(doc.Find("#flash").Text(), "Secret rotated") {
		t.Fatalf("rotate: %d, shown %q / %q", resp.StatusCode, doc.Find("#secret").Text(), doc.Find("#previous-secret").Text())
	}
	if resp, _ := f.do(c, "GET", "/endpoints/"+ep+"/secret", nil, nil); resp.StatusCode == http.StatusOK {
		t.Errorf("the secret can be fetched with a GET")
	}
}

func TestSuccessRate(t *testing.T) {
	for _, c := range []struct {
		ok, dead    int
		rate, class string
	}{{1, 0, "100%", "code-ok"}, {999, 1, "99%", "code-warn"}, {9, 1, "90%", "code-warn"}, {1, 1, "50%", "code-err"}, {0, 3, "0%", "code-err"}} {
		if r, cl := successRate(c.ok, c.dead), successClass(c.ok, c.dead); r != c.rate || cl != c.class {
			t.Errorf("%d ok, %d dead: %s %s, want %s %s", c.ok, c.dead, r, cl, c.rate, c.class)
		}
	}
}

// TestEndpointsShowConcurrencyAndSetMaxInFlight: each endpoint shows its
// adaptive limit and requests in flight summed over the live workers'
// heartbeats, and how many deliveries wait; its max_in_flight is set from
// the row (empty: the default), a bad value changes nothing.
func TestEndpointsShowConcurrencyAndSetMaxInFlight(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep, _ := f.seed("acme", 3, "invoice.paid") // three pending deliveries, due now
	ctx := context.Background()
	for _, l := range []storage.EndpointLoad{{Limit: 40, InFlight: 12}, {Limit: 25, InFlight: 3}} {
		if err := f.db.Beat(ctx, storage.NewWorkerID(), map[string]storage.EndpointLoad{ep: l}); err != nil {
			t.Fatal(err)
		}
	}
	c := f.client()
	f.login(c)
	cell := func() *goquery.Selection {
		t.Helper()
		_, body := f.do(c, "GET", "/endpoints", nil, nil)
		doc, _ := goquery.NewDocumentFromReader(strings.NewReader(body))
		return doc.Find(`tr[data-endpoint-id="` + ep + `"] td.concurrency`)
	}
	td := cell()
	if td.Find(".limit").Text() != "65" || td.Find(".in-flight").Text() != "15" || td.Find(".due").Text() != "3" {
		t.Fatalf("concurrency cell %q, want limit 65, 15 in flight, 3 waiting", strings.Join(strings.Fields(td.Text()), " "))
	}
	if v := td.Find(`input[name="max_in_flight"]`).AttrOr("value", ""); v != "1000" {
		t.Fatalf("max_in_flight shown %q, want the default 1000", v)
	}

	for _, bad := range []string{"0", "1001", "x"} {
		resp, _ := f.do(c, "POST", "/endpoints/"+ep+"/max-in-flight", url.Values{"max_in_flight": {bad}}, nil)
		if resp.Header.Get("Location") != "/endpoints?done=bad_max_in_flight" {
			t.Fatalf("max_in_flight %q: %q", bad, resp.Header.Get("Location"))
		}
	}
	resp, _ := f.do(c, "POST", "/endpoints/"+ep+"/max-in-flight", url.Values{"max_in_flight": {"25"}}, nil)
	if resp.Header.Get("Location") != "/endpoints?done=max_in_flight" {
		t.Fatalf("set max_in_flight: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if v := cell().Find(`input[name="max_in_flight"]`).AttrOr("value", ""); v != "25" {
		t.Fatalf("max_in_flight after setting 25: %q", v)
	}
	f.do(c, "POST", "/endpoints/"+ep+"/max-in-flight", url.Values{"max_in_flight": {""}}, nil)
	if v := cell().Find(`input[name="max_in_flight"]`).AttrOr("value", ""); v != "1000" {
		t.Fatalf("max_in_flight after clearing: %q, want the default", v)
	}
}

// TestEndpointsShowAnOpenCircuit: an endpoint whose circuit is open says
// so, with its next probe, and one disabled for failing says why; an
// ordered one says it is.
func TestEndpointsShowAnOpenCircuit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep, _ := f.seed("acme", 1, "invoice.paid")
	ctx := context.Background()
	if _, err := f.db.Pool().Exec(ctx, `UPDATE endpoints SET circuit = 'open', probe_at = now() + interval '5 minutes',
		status = 'disabled', disabled_reason = 'failing', ordering = 'fifo' WHERE id = $1`, ep); err != nil {
		t.Fatal(err)
	}
	c := f.client()
	f.login(c)
	_, body := f.do(c, "GET", "/endpoints", nil, nil)
	doc, _ := goquery.NewDocumentFromReader(strings.NewReader(body))
	row := doc.Find(`tr[data-endpoint-id="` + ep + `"]`)
	if got := row.Find(".circuit").Text(); got != "circuit open" {
		t.Fatalf("circuit badge %q", got)
	}
	if got := row.Find(".next-probe").Text(); !strings.Contains(got, "from now") {
		t.Fatalf("next probe %q", got)
	}
	if got := row.Find(".badge-dead_letter").Text(); got != "disabled: failing" {
		t.Fatalf("disabled badge %q", got)
	}
	if got := row.Find(".ordering").Text(); got != "ordered · one at a time" {
		t.Fatalf("ordering badge %q", got)
	}
}

// TestEndpointPageShowsItsLifecycle: an endpoint's page lists the
// operational events about it (circuit opened, closed; disabled), newest
// first, and none about other endpoints.
func TestEndpointPageShowsItsLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep, _ := f.seed("acme", 0, "invoice.paid")
	other, _ := f.seed("other", 0, "invoice.paid")
	ctx := context.Background()
	c := f.client()
	f.login(c)
	_, body := f.do(c, "GET", "/endpoints/"+ep, nil, nil)
	if parseHTML(t, body).Find("#lifecycle-empty").Length() != 1 {
		t.Fatalf("an endpoint with no lifecycle events shows some")
	}
	var project string
	if err := f.db.Pool().QueryRow(ctx, `SELECT project_id FROM endpoints WHERE id = $1`, ep).Scan(&project); err != nil {
		t.Fatal(err)
	}
	emit := func(typ, about, data string) {
		t.Helper()
		if _, err := f.db.Store().CreateEvents(ctx, project, []storage.NewEvent{{Type: typ, Data: json.RawMessage(data),
			EndpointIDs: []string{}}}, time.Now(), func(int) string { return "" }); err != nil {
			t.Fatal(err)
		}
	}
	emit(webhookd.EventEndpointDisabled, ep, `{"endpoint_id":"`+ep+`","disabled_reason":"gone"}`)
	emit(webhookd.EventCircuitOpened, ep, `{"endpoint_id":"`+ep+`","consecutive_failures":10,"next_probe_at":"2026-12-02T10:00:30Z"}`)
	emit(webhookd.EventCircuitOpened, other, `{"endpoint_id":"`+other+`","consecutive_failures":12}`)
	emit(webhookd.EventCircuitClosed, ep, `{"endpoint_id":"`+ep+`"}`)
	emit(webhookd.EventEndpointDisabled, ep, `{"endpoint_id":"`+ep+`","disabled_reason":"failing"}`)
	_, body = f.do(c, "GET", "/endpoints/"+ep, nil, nil)
	var got []string
	parseHTML(t, body).Find(".lifecycle-table tbody tr .what").Each(func(_ int, s *goquery.Selection) { got = append(got, s.Text()) })
	want := []string{"Disabled: no successful attempt within the disable window",
		"Circuit closed: an attempt succeeded, the waiting deliveries flow again",
		"Circuit opened after 10 consecutive failed attempts; first probe at 2026-12-02 10:00:30 UTC",
		"Disabled: the endpoint answered 410 Gone"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("lifecycle %q, want %q", got, want)
	}
	// The page shown again after a preview, or after a save the form
	// refused, is the same page: its lifecycle too.
	for _, again := range []struct {
		path string
		form url.Values
	}{
		{"/endpoints/" + ep + "/preview", url.Values{"url": {"http://127.0.0.1:9/p"}, "preview_type": {"invoice.paid"}}},
		{"/endpoints/" + ep, url.Values{"url": {"not a url"}}},
	} {
		_, body = f.do(c, "POST", again.path, again.form, nil)
		if n := parseHTML(t, body).Find(".lifecycle-table tbody tr").Length(); n != len(want) {
			t.Fatalf("POST %s: the page shows %d lifecycle events, want %d", again.path, n, len(want))
		}
	}
}
