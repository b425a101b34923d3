package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
)

const slackScript = `function handler(w) { w.payload = {text: "n is " + w.payload.data.n}; w.headers["x-partner"] = "p1"; return w }`

// TestEndpointTransformationFormAndPreview: the endpoint form takes a
// transformation checked as the API checks it (the script's error in the
// form, nothing saved), and the preview pane, without JavaScript, tries
// the form's filter and transformation, unsaved, on a past event or a
// given one: matched or not, the request that would be sent beside the
// event's body, a cancel, or the script's error.
func TestEndpointTransformationFormAndPreview(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) {
		c.AllowPrivateNetworks = true
		// The previews' results are the subject here, not the budget (the
		// transform package tests that): under -race beside the other
		// packages' tests, the default 50 ms ran out on a catalog example
		// (CI on ced1fb5).
		c.TransformTimeout = 5 * time.Second
	})
	ep, ids := f.seed("p", 1, "order.paid")
	c := f.client()
	f.login(c)
	ctx := context.Background()
	d, err := f.db.Store().DashboardDelivery(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	eventID := d.EventID

	_, body := f.do(c, "GET", "/endpoints/"+ep, nil, nil)
	doc := parseHTML(t, body)
	if doc.Find(`textarea[name="transformation"]`).Length() != 1 || doc.Find(`#preview-event option[value="`+eventID+`"]`).Length() != 1 {
		t.Fatal("the endpoint page lacks the transformation textarea or the past event to preview")
	}
	if action, _ := doc.Find("#preview-run").Attr("formaction"); action != "/endpoints/"+ep+"/preview" {
		t.Fatalf("preview button posts to %q", action)
	}

	resp, body := f.do(c, "POST", "/endpoints/"+ep, url.Values{"url": {"http://127.0.0.1:9/p"},
		"transformation": {"function handler(w) { return w "}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(parseHTML(t, body).Find("#form-error").Text(), "syntax error") {
		t.Fatalf("bad transformation: %d", resp.StatusCode)
	}

	preview := func(extra url.Values) (int, string) {
		t.Helper()
		form := url.Values{"url": {"http://127.0.0.1:9/p"}, "filter": {`{"data.n": 1}`}, "transformation": {slackScript}}
		for k, v := range extra {
			form[k] = v
		}
		resp, body := f.do(c, "POST", "/endpoints/"+ep+"/preview", form, nil)
		return resp.StatusCode, body
	}
	code, body := preview(url.Values{"preview_event": {eventID}})
	doc = parseHTML(t, body)
	if code != http.StatusOK || !strings.Contains(doc.Find("#preview-filter").Text(), "does not match") ||
		!strings.Contains(doc.Find("#preview-body").Text(), `"text": "n is 0"`) ||
		!strings.Contains(doc.Find("#preview-original").Text(), `"n": 0`) ||
		!strings.Contains(doc.Find("#preview-headers").Text(), "x-partner") {
		t.Fatalf("preview of a past event: %d\n%s", code, doc.Find("#preview-result").Text())
	}
	if doc.Find(`textarea[name="transformation"]`).Text() != slackScript {
		t.Fatal("the preview lost the form's unsaved transformation")
	}
	code, body = preview(url.Values{"preview_type": {"order.paid"}, "preview_data": {`{"n":1}`},
		"transformation": {`function handler(w) { return {cancel: true} }`}})
	doc = parseHTML(t, body)
	if code != http.StatusOK || !strings.Contains(doc.Find("#preview-filter").Text(), "matches") ||
		doc.Find("#preview-canceled").Length() != 1 || doc.Find("#preview-body").Length() != 0 {
		t.Fatalf("preview of a cancel: %d\n%s", code, doc.Find("#preview-result").Text())
	}
	_, body = preview(url.Values{"preview_type": {"order.paid"}, "preview_data": {`{}`},
		"transformation": {`function handler(w) { throw new Error("no total") }`}})
	if !strings.Contains(parseHTML(t, body).Find("#preview-transform-error").Text(), "no total") {
		t.Fatal("preview of a throw does not show its error")
	}
	_, body = preview(url.Values{"preview_type": {"order.paid"}, "preview_data": {`{nope`}})
	if !strings.Contains(parseHTML(t, body).Find("#preview-error").Text(), "JSON") {
		t.Fatal("preview of bad data does not say so")
	}

	// A catalog example, picked from the types that have one.
	proj, err := f.db.Store().ProjectByName(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	for _, et := range []storage.EventType{{ProjectID: proj.ID, Name: "order.updated", Example: []byte(`{"n":7}`)},
		{ProjectID: proj.ID, Name: "order.bare"}} {
		if _, err := f.db.Store().CreateEventType(ctx, et, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	_, body = f.do(c, "GET", "/endpoints/"+ep, nil, nil)
	doc = parseHTML(t, body)
	if got := doc.Find(`#preview-example option[value="order.updated"]`).Text(); got != "order.updated example" ||
		doc.Find(`#preview-example option[value="order.bare"]`).Length() != 0 {
		t.Fatalf("example picker offers %q; want order.updated's example and not order.bare", doc.Find("#preview-example").Text())
	}
	code, body = preview(url.Values{"preview_example": {"order.updated"}, "preview_type": {"order.paid"}, "preview_data": {`{"n":1}`}})
	doc = parseHTML(t, body)
	if code != http.StatusOK || !strings.Contains(doc.Find("#preview-body").Text(), `"text": "n is 7"`) ||
		!strings.Contains(doc.Find("#preview-original").Text(), `"type": "order.updated"`) ||
		!strings.Contains(doc.Find("#preview-filter").Text(), "does not match") {
		t.Fatalf("preview of a catalog example: %d\n%s", code, doc.Find("#preview-result").Text())
	}
	if v, _ := doc.Find(`#preview-example option[selected]`).Attr("value"); v != "order.updated" {
		t.Fatalf("the picked example is not kept selected: %q", v)
	}
	_, body = preview(url.Values{"preview_example": {"order.bare"}})
	if !strings.Contains(parseHTML(t, body).Find("#preview-error").Text(), "no example of order.bare") {
		t.Fatal("preview of a type without an example does not say so")
	}

	if e, _ := f.db.Store().DashboardEndpoint(ctx, ep); e.Transformation != nil || e.Filter != nil || e.Version != 1 {
		t.Fatalf("a preview or a refused form changed the endpoint: %+v", e)
	}

	resp, _ = f.do(c, "POST", "/endpoints/"+ep, url.Values{"url": {"http://127.0.0.1:9/p"}, "transformation": {slackScript}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save: %d", resp.StatusCode)
	}
	if e, _ := f.db.Store().DashboardEndpoint(ctx, ep); e.Transformation == nil || *e.Transformation != slackScript {
		t.Fatalf("saved transformation %v", e.Transformation)
	}
	_, body = f.do(c, "GET", "/endpoints/"+ep, nil, nil)
	if !strings.Contains(parseHTML(t, body).Find("#transformation").Text(), "n is") {
		t.Fatal("the endpoint's page does not show its transformation")
	}
	resp, _ = f.do(c, "POST", "/endpoints/"+ep, url.Values{"url": {"http://127.0.0.1:9/p"}, "transformation": {"  "}}, nil)
	if e, _ := f.db.Store().DashboardEndpoint(ctx, ep); resp.StatusCode != http.StatusSeeOther || e.Transformation != nil {
		t.Fatalf("an empty textarea should remove it: %d %v", resp.StatusCode, e.Transformation)
	}

	// canceled is offered and accepted by the deliveries list's filter.
	resp, body = f.do(c, "GET", "/?status=canceled", nil, nil)
	if resp.StatusCode != http.StatusOK || parseHTML(t, body).Find(`option[value="canceled"]`).Length() == 0 {
		t.Fatalf("deliveries filtered by canceled: %d", resp.StatusCode)
	}
}

// TestPortalPreview: the portal's endpoint page has the same pane, within
// its session.
func TestPortalPreview(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.AllowPrivateNetworks = true })
	ep, _ := f.seed("alpha", 1, "order.paid")
	ctx := context.Background()
	p, _ := f.db.Store().ProjectByName(ctx, "alpha")
	if _, err := f.db.Store().CreateEventType(ctx, storage.EventType{ProjectID: p.ID, Name: "order.paid",
		Example: []byte(`{"n":41}`)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	c := noCookies()
	base := f.openPortal(c, f.portalLink("alpha", time.Hour))
	_, body := f.do(c, "GET", base+"/endpoints/"+ep, nil, nil)
	if action, _ := parseHTML(t, body).Find("#preview-run").Attr("formaction"); action != base+"/endpoints/"+ep+"/preview" {
		t.Fatalf("preview button posts to %q", action)
	}
	// No data: the catalog's example.
	resp, body := f.do(c, "POST", base+"/endpoints/"+ep+"/preview", url.Values{"url": {"http://127.0.0.1:9/alpha"},
		"transformation": {slackScript}, "preview_type": {"order.paid"}}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(parseHTML(t, body).Find("#preview-body").Text(), "n is 41") {
		t.Fatalf("portal preview: %d\n%s", resp.StatusCode, parseHTML(t, body).Find("#preview-result").Text())
	}
	// The example picked from the catalog's.
	if parseHTML(t, body).Find(`#preview-example option[value="order.paid"]`).Length() != 1 {
		t.Fatal("the portal's pane does not offer the catalog's example")
	}
	resp, body = f.do(c, "POST", base+"/endpoints/"+ep+"/preview", url.Values{"url": {"http://127.0.0.1:9/alpha"},
		"transformation": {slackScript}, "preview_example": {"order.paid"}}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(parseHTML(t, body).Find("#preview-body").Text(), "n is 41") {
		t.Fatalf("portal preview of the picked example: %d\n%s", resp.StatusCode, parseHTML(t, body).Find("#preview-result").Text())
	}
}

// TestTransformationExamplesRun: the form's examples are scripts the
// engine takes and that make what they say.
func TestTransformationExamplesRun(t *testing.T) {
	e := transform.NewEngine(transform.Config{Budget: time.Second})
	w := transform.Webhook{Method: "POST", URL: "https://partner.example.com/hooks", Headers: map[string]string{},
		Payload: []byte(`{"id":"evt_1","type":"order.paid","timestamp":"2026-01-01T00:00:00Z","data":{"id":"o_1","total":12.5,"currency":"EUR"}}`)}
	for src, want := range map[string]string{
		transformationExample:        `{"text":"Order o_1 paid: 12.5 EUR"}`,
		transformationPartnerExample: `{"orderRef":"o_1","amountCents":1250,"occurredAt":"2026-01-01T00:00:00Z"}`,
	} {
		res, err := e.Run(context.Background(), "example", src, w)
		if err != nil || string(res.Body) != want {
			t.Errorf("%s\n: %s, %v; want %s", src, res.Body, err, want)
		}
	}
}
