package dashboard

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
	"github.com/webhookd/webhookd/wire"
)

// headerOf returns the value of header name in a captured request's table.
func headerOf(doc *goquery.Document, name string) string {
	var v string
	doc.Find("table.headers tr").Each(func(_ int, tr *goquery.Selection) {
		if strings.EqualFold(tr.Find("th").Text(), name) {
			v = tr.Find("td").Text()
		}
	})
	return v
}

func parseHTML(t *testing.T, body string) *goquery.Document {
	t.Helper()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestSendToInspectorSignsAndChangesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) {
		c.Inspector = dispatcher.NewInspector(c.DB, nil, nil, transform.Config{Budget: 5 * time.Second})
	})
	epID, ids := f.seed("acme", 1, "invoice.paid")
	ctx, s := context.Background(), f.db.Store()
	before, err := s.DashboardDelivery(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	// A rotation is under way: the old secret still signs beside the new one.
	if _, err := s.RotateSecret(ctx, before.ProjectID, epID, "whsec_bmV3LXNlY3JldC1uZXctc2VjcmV0LW5ldw==", time.Now()); err != nil {
		t.Fatal(err)
	}
	c := f.client()
	f.login(c)

	// From another origin: refused, and no attempt is made.
	resp, _ := f.do(c, "POST", "/deliveries/"+ids[0]+"/inspect", url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site send: %d", resp.StatusCode)
	}
	resp, _ = f.do(c, "POST", "/deliveries/"+ids[0]+"/inspect", url.Values{}, nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/inspector/requests/ir_") {
		t.Fatalf("send to inspector: %d %q", resp.StatusCode, loc)
	}
	resp, body := f.do(c, "GET", loc, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("request page: %d", resp.StatusCode)
	}
	doc := parseHTML(t, body)
	check := doc.Find(".capture .badge")
	if check.Text() != "signature valid" || !check.HasClass("check-valid") {
		t.Fatalf("check %q", check.Text())
	}
	if d := doc.Find(".check-detail").First().Text(); !strings.Contains(d, "current secret") || !strings.Contains(d, "previous secret") {
		t.Errorf("detail %q does not name both secrets of the rotation", d)
	}
	after, err := s.DashboardDelivery(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Attempts) != 1 {
		t.Fatalf("%d attempts logged", len(after.Attempts))
	}
	a := after.Attempts[0]
	for name, want := range map[string]string{"webhook-id": before.EventID, "X-Event-Id": before.EventID,
		"X-Event-Type": "invoice.paid", "X-Delivery-Attempt": "1", "X-Request-Id": a.RequestID,
		"Content-Type": "application/json", "User-Agent": "webhookd/" + webhookd.Version,
		"Host": strings.TrimPrefix(f.ts.URL, "http://"), "Accept-Encoding": "gzip"} {
		if got := headerOf(doc, name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	if sig := headerOf(doc, "webhook-signature"); len(strings.Fields(sig)) != 2 {
		t.Errorf("webhook-signature %q: want two entries during a rotation", sig)
	}
	if !strings.Contains(doc.Find(".request-body").Text(), `"invoice.paid"`) {
		t.Errorf("body %q", doc.Find(".request-body").Text())
	}
	// Logged as an inspector attempt to the bin, and the delivery is as it was.
	if a.Trigger != webhookd.TriggerInspector || a.Number != 1 || a.StatusCode == nil || *a.StatusCode != 200 ||
		!strings.HasSuffix(a.URL, "/in/"+storage.InspectorSendBin) {
		t.Errorf("attempt %+v", a)
	}
	if after.Status != before.Status || after.AttemptsCount != before.AttemptsCount ||
		!after.NextAttemptAt.Equal(*before.NextAttemptAt) || after.LastStatusCode != nil || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("the delivery changed: before %+v, after %+v", before.Delivery, after.Delivery)
	}
	// A second send: another attempt with the same number, still nothing changed.
	f.do(c, "POST", "/deliveries/"+ids[0]+"/inspect", url.Values{}, nil)
	if again, _ := s.DashboardDelivery(ctx, ids[0]); len(again.Attempts) != 2 || again.AttemptsCount != 0 || again.Attempts[1].Number != 1 {
		t.Errorf("second send: %d attempts, count %d", len(again.Attempts), again.AttemptsCount)
	}

	// The same headers with another body: the signature no longer verifies.
	tampered, _ := http.NewRequest("POST", f.ts.URL+"/in/"+storage.InspectorSendBin, strings.NewReader(`{"forged":true}`))
	for _, h := range []string{"webhook-id", "webhook-timestamp", "webhook-signature", "X-Request-Id"} {
		tampered.Header.Set(h, headerOf(doc, h))
	}
	r, err := http.DefaultClient.Do(tampered)
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("post to the bin: %v %v", r, err)
	}
	r.Body.Close()
	_, body = f.do(c, "GET", "/inspector/bins/"+storage.InspectorSendBin, nil, nil)
	newest := parseHTML(t, body).Find(".capture").First()
	if got := newest.Find(".badge").Text(); got != "signature invalid" {
		t.Errorf("tampered body: %q", got)
	}
}

func TestBinsReceiveAnythingAndRefuseWhatTheyCannotKeep(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.InspectorKeep, c.InspectorMaxBody = 3, 64 })
	c := f.client()
	f.login(c)
	resp, _ := f.do(c, "POST", "/inspector/bins", url.Values{"name": {`<b>orders</b>`}}, nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/inspector/bins/bin_") {
		t.Fatalf("create bin: %d %q", resp.StatusCode, loc)
	}
	bin := strings.TrimPrefix(loc, "/inspector/bins/")
	post := func(path, body string) int {
		t.Helper()
		r, err := http.Post(f.ts.URL+path, "text/plain", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	if got := post("/in/bin_nope", "x"); got != http.StatusNotFound {
		t.Errorf("unknown bin: %d", got)
	}
	if got := post("/in/"+bin, strings.Repeat("x", 65)); got != http.StatusRequestEntityTooLarge {
		t.Errorf("body over the limit: %d", got)
	}
	for i := range 4 {
		if got := post("/in/"+bin+"?n="+strconv.Itoa(i), `<img src=x onerror=alert(1)>`); got != http.StatusOK {
			t.Fatalf("post %d: %d", i, got)
		}
	}
	_, body := f.do(c, "GET", loc, nil, nil)
	doc := parseHTML(t, body)
	caps := doc.Find(".capture")
	if caps.Length() != 3 || !strings.Contains(caps.First().Find(".url").Text(), "n=3") {
		t.Fatalf("%d requests kept, newest %q: want the newest 3", caps.Length(), caps.First().Find(".url").Text())
	}
	if doc.Find("img").Length() != 0 || doc.Find("h1 b").Length() != 0 ||
		!strings.Contains(caps.First().Find(".request-body").Text(), "<img src=x onerror=alert(1)>") {
		t.Errorf("a body or a name was rendered as HTML")
	}
	if got := caps.First().Find(".badge").Text(); got != "signature not checked" {
		t.Errorf("unsigned request: %q", got)
	}
	if got := doc.Find("#bin-url").Text(); got != f.ts.URL+"/in/"+bin {
		t.Errorf("bin url %q", got)
	}
	_, body = f.do(c, "GET", "/inspector", nil, nil)
	if rows := parseHTML(t, body).Find("table.bins tbody tr"); rows.Length() != 2 ||
		rows.First().AttrOr("data-bin-id", "") != storage.InspectorSendBin {
		t.Errorf("inspector page lists %d bins", rows.Length())
	}
}

func TestSignatureMatchesWhatTheDispatcherSigns(t *testing.T) {
	t.Parallel()
	cur, prev := "whsec_Y3VycmVudC1zZWNyZXQ=", "whsec_cHJldmlvdXMtc2VjcmV0"
	ts := time.Unix(1700000000, 0)
	body := []byte(`{"id":"evt_1"}`)
	both, err := wire.SignatureHeader([]string{cur, prev}, "evt_1", ts, body)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		secret, id, ts, header string
		body                   []byte
		want                   bool
	}{
		{cur, "evt_1", "1700000000", both, body, true},
		{prev, "evt_1", "1700000000", both, body, true},
		{"whsec_b3RoZXI=", "evt_1", "1700000000", both, body, false},
		{cur, "evt_2", "1700000000", both, body, false},
		{cur, "evt_1", "1700000001", both, body, false},
		{cur, "evt_1", "1700000000", both, []byte(`{"id":"evt_2"}`), false},
		{cur, "evt_1", "1700000000", strings.ReplaceAll(both, "v1,", "v2,"), body, false},
		{"not-a-secret", "evt_1", "1700000000", both, body, false},
	} {
		if got := signatureMatches(c.secret, c.id, c.ts, c.body, c.header); got != c.want {
			t.Errorf("%+v: %v", c, got)
		}
	}
}

// TestSendToInspectorTransformed: an endpoint's transformation applies to
// what the inspector gets, signed over the transformed body; one that
// fails is logged as an attempt that sent nothing.
func TestSendToInspectorTransformed(t *testing.T) {
	t.Parallel()
	// The workers' payload limit, small: a body over it is not sent.
	f := newFixture(t, func(c *Config) {
		c.Inspector = dispatcher.NewInspector(c.DB, nil, nil, transform.Config{MaxOutput: 4096, Budget: 5 * time.Second})
	})
	epID, ids := f.seed("acme", 1, "invoice.paid")
	ctx, s := context.Background(), f.db.Store()
	d, _ := s.DashboardDelivery(ctx, ids[0])
	set := func(src string) {
		t.Helper()
		p := &src
		if _, err := s.UpdateEndpoint(ctx, d.ProjectID, epID, storage.EndpointPatch{Transformation: &p}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	set(`function handler(w) { w.payload = {text: "n=" + w.payload.data.n}; w.headers["x-partner"] = "p1"; w.url += "/elsewhere"; return w }`)
	c := f.client()
	f.login(c)
	resp, _ := f.do(c, "POST", "/deliveries/"+ids[0]+"/inspect", url.Values{}, nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/inspector/requests/ir_") {
		t.Fatalf("send to inspector: %d %q", resp.StatusCode, loc)
	}
	_, body := f.do(c, "GET", loc, nil, nil)
	doc := parseHTML(t, body)
	if got := doc.Find(".request-body").Text(); !strings.Contains(got, `"text":"n=0"`) && !strings.Contains(got, `"text": "n=0"`) {
		t.Fatalf("the bin got body %q, want the transformed one", got)
	}
	if headerOf(doc, "X-Partner") != "p1" || doc.Find(".capture .badge").Text() != "signature valid" {
		t.Fatalf("header %q, check %q", headerOf(doc, "X-Partner"), doc.Find(".capture .badge").Text())
	}

	set(`function handler(w) { throw new Error("no total") }`)
	f.do(c, "POST", "/deliveries/"+ids[0]+"/inspect", url.Values{}, nil)
	after, _ := s.DashboardDelivery(ctx, ids[0])
	if len(after.Attempts) != 2 || after.Attempts[1].Error == nil || !strings.Contains(*after.Attempts[1].Error, "no total") ||
		after.Attempts[1].StatusCode != nil || after.Status != d.Status {
		t.Fatalf("a failing script's inspector attempt: %+v", after.Attempts)
	}

	set(`function handler(w) { w.payload = {pad: "x".repeat(5000)}; return w }`)
	f.do(c, "POST", "/deliveries/"+ids[0]+"/inspect", url.Values{}, nil)
	after, _ = s.DashboardDelivery(ctx, ids[0])
	if len(after.Attempts) != 3 || after.Attempts[2].Error == nil || !strings.Contains(*after.Attempts[2].Error, "4096") ||
		after.Attempts[2].StatusCode != nil {
		t.Fatalf("a body over the payload limit's inspector attempt: %+v", after.Attempts)
	}
}
