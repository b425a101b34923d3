package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// portalLink makes a link token for the project named name, valid for ttl
// from now (negative: expired already).
func (f *fixture) portalLink(name string, ttl time.Duration) string {
	f.t.Helper()
	ctx, s := context.Background(), f.db.Store()
	p, err := s.ProjectByName(ctx, name)
	if err != nil {
		f.t.Fatal(err)
	}
	now := time.Now()
	created := now
	if ttl < 0 {
		created = now.Add(2 * ttl)
	}
	token, err := s.CreatePortalLink(ctx, p.ID, created, now.Add(ttl))
	if err != nil {
		f.t.Fatal(err)
	}
	return token
}

// openPortal opens a link with c and returns the base of the portal's
// pages: "/portal" when c keeps cookies, "/portal/s/<session>" when not.
func (f *fixture) openPortal(c *http.Client, token string) string {
	f.t.Helper()
	resp, _ := f.do(c, "GET", "/portal/open/"+token, nil, nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/portal/s/") {
		f.t.Fatalf("open link: %d to %q", resp.StatusCode, loc)
	}
	resp, _ = f.do(c, "GET", loc, nil, nil)
	switch {
	case resp.StatusCode == http.StatusSeeOther && resp.Header.Get("Location") == "/portal/":
		return "/portal"
	case resp.StatusCode == http.StatusOK && c.Jar == nil:
		return strings.TrimSuffix(loc, "/")
	}
	f.t.Fatalf("after opening: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	return ""
}

// noCookies is a client that keeps no cookies (a frame whose third-party
// cookies are blocked) and follows no redirects.
func noCookies() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func TestPortalLinkOpensOnceAndStartsASessionForItsProject(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	_, alpha := f.seed("alpha", 2, "order.paid")
	_, beta := f.seed("beta", 1, "order.paid")
	token := f.portalLink("alpha", 15*time.Minute)

	c := f.client()
	resp, _ := f.do(c, "GET", "/portal/open/"+token, nil, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("open: %d", resp.StatusCode)
	}
	ck := resp.Cookies()[0]
	if ck.Name != portalCookie || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/portal/" ||
		ck.MaxAge != int((12*time.Hour).Seconds()) {
		t.Fatalf("portal cookie %+v", ck)
	}
	if strings.Contains(ck.Value, token) || strings.Contains(resp.Header.Get("Location"), token) {
		t.Fatal("the session carries the link's token")
	}
	resp, _ = f.do(c, "GET", resp.Header.Get("Location"), nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/portal/" {
		t.Fatalf("with the cookie, the session leaves the address: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := f.do(c, "GET", "/portal/", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("portal home: %d", resp.StatusCode)
	}
	doc := parseHTML(t, body)
	if got := doc.Find("#project-name").Text(); got != "alpha" {
		t.Fatalf("project on top: %q", got)
	}
	for _, id := range alpha {
		if doc.Find(`tr[data-delivery-id="`+id+`"]`).Length() != 1 {
			t.Errorf("delivery %s of alpha missing", id)
		}
	}
	if strings.Contains(body, beta[0]) || strings.Contains(body, "beta") {
		t.Error("the portal shows something of project beta")
	}
	if doc.Find(`a[href="/inspector"], a[href="/"], #f-project`).Length() != 0 {
		t.Error("the portal links to operator pages or offers a project filter")
	}
	if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "frame-ancestors 'none'") ||
		resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("portal headers without frame ancestors: CSP %q, XFO %q", got, resp.Header.Get("X-Frame-Options"))
	}

	// The link is spent: opening it again starts nothing.
	again := f.client()
	resp, body = f.do(again, "GET", "/portal/open/"+token, nil, nil)
	if resp.StatusCode != http.StatusGone || len(resp.Cookies()) != 0 || !strings.Contains(body, "used already") {
		t.Fatalf("spent link: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	if resp, _ = f.do(again, "GET", "/portal/", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no session after a spent link: %d", resp.StatusCode)
	}

	// Logging out ends the session, cookie and path alike.
	path := f.openPortal(noCookies(), f.portalLink("alpha", time.Hour))
	f.do(c, "POST", "/portal/logout", url.Values{}, nil)
	if resp, _ = f.do(c, "GET", "/portal/", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("after logout: %d", resp.StatusCode)
	}
	nc := noCookies()
	if resp, _ = f.do(nc, "GET", path+"/", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("another session is untouched by a logout: %d", resp.StatusCode)
	}
	f.do(nc, "POST", path+"/logout", url.Values{}, nil)
	if resp, _ = f.do(nc, "GET", path+"/", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("path session after logout: %d", resp.StatusCode)
	}
}

func TestPortalRefusesExpiredForgedAndRepeatedFailures(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Now()}
	f := newFixture(t, func(c *Config) { c.Clock = clk; c.FailedLoginBurst = 3 })
	f.seed("alpha", 1, "order.paid")
	expired := f.portalLink("alpha", -time.Minute)
	good := f.portalLink("alpha", time.Hour)
	for _, tok := range []string{expired, "wpl_forged0000000000000000000000000000000000", good + "x"} {
		c := f.client()
		resp, _ := f.do(c, "GET", "/portal/open/"+tok, nil, nil)
		if resp.StatusCode != http.StatusGone || len(resp.Cookies()) != 0 {
			t.Fatalf("link %q: %d, cookies %v", tok, resp.StatusCode, resp.Cookies())
		}
	}
	// Three failures from this address: even a good link waits now.
	resp, _ := f.do(f.client(), "GET", "/portal/open/"+good, nil, nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("after failures: %d", resp.StatusCode)
	}
	clk.add(time.Minute)
	f.openPortal(f.client(), good)

	// Forged sessions, in the path or the cookie, and an expired one.
	nc := noCookies()
	for _, p := range []string{"/portal/s/forged/", "/portal/s/" + strings.Repeat("A", 80) + "/", "/portal/"} {
		if resp, _ := f.do(nc, "GET", p, nil, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
	base := f.openPortal(nc, f.portalLink("alpha", time.Hour))
	clk.add(13 * time.Hour)
	if resp, _ := f.do(nc, "GET", base+"/", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a session 13 h old: %d", resp.StatusCode)
	}
}

// TestPortalIsolation tries every portal route with another project's ids,
// the operator's session against the portal, the portal's against the
// operator, and every POST cross-origin.
func TestPortalIsolation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	alphaEP, alpha := f.seed("alpha", 1, "order.paid")
	betaEP, beta := f.seed("beta", 1, "order.paid")
	alphaDL := f.deadLetter(alpha[0], webhookd.ReasonClientError)
	betaDL := f.deadLetter(beta[0], webhookd.ReasonClientError)
	ctx := context.Background()
	betaProject, _ := f.db.Store().ProjectByName(ctx, "beta")
	betaJob, err := f.db.Store().CreateJob(ctx, betaProject.ID, storage.DeadLetterFilter{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	for _, mode := range []string{"cookie", "path"} {
		c := f.client()
		if mode == "path" {
			c = noCookies()
		}
		base := f.openPortal(c, f.portalLink("alpha", time.Hour))
		other := []struct{ method, path string }{
			{"GET", "/deliveries/" + beta[0]},
			{"POST", "/deliveries/" + beta[0] + "/redeliver"},
			{"GET", "/endpoints/" + betaEP},
			{"POST", "/endpoints/" + betaEP},
			{"POST", "/endpoints/" + betaEP + "/status"},
			{"POST", "/endpoints/" + betaEP + "/test"},
			{"POST", "/endpoints/" + betaEP + "/secret"},
			{"POST", "/endpoints/" + betaEP + "/rotate-secret"},
			{"GET", "/jobs?id=" + betaJob.ID},
			{"POST", "/dead-letters/replay?action=selected"},
			{"GET", "/inspector"},
			{"GET", "/inspector/bins/bin_inspector"},
			{"POST", "/deliveries/" + alpha[0] + "/inspect"},
			{"GET", "/login"},
		}
		for _, o := range other {
			form := url.Values{"status": {"disabled"}, "url": {"https://example.com/x"}, "action": {"selected"}, "id": {betaDL}}
			resp, body := f.do(c, o.method, base+o.path, form, nil)
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s: %s %s: %d, want 404", mode, o.method, o.path, resp.StatusCode)
			}
			if strings.Contains(body, "beta") || strings.Contains(body, betaEP) {
				t.Errorf("%s: %s %s shows project beta", mode, o.method, o.path)
			}
		}
		// Filters naming beta's endpoint or project find nothing of it.
		for _, p := range []string{"/?endpoint=" + betaEP, "/?project=" + betaProject.ID, "/?delivery_id=" + beta[0],
			"/dead-letters?endpoint=" + betaEP, "/dead-letters?project=" + betaProject.ID, "/endpoints", "/event-types"} {
			resp, body := f.do(c, "GET", base+p, nil, nil)
			doc := parseHTML(t, body)
			if resp.StatusCode != http.StatusOK || strings.Contains(body, "beta") ||
				doc.Find(`[data-delivery-id="`+beta[0]+`"], [data-dead-letter-id="`+betaDL+`"], [data-endpoint-id="`+betaEP+`"]`).Length() != 0 {
				t.Errorf("%s: GET %s: %d or shows beta", mode, p, resp.StatusCode)
			}
		}
		// Replay all matching starts a job for alpha alone.
		resp, _ := f.do(c, "POST", base+"/dead-letters/replay", url.Values{"action": {"all"}, "project": {betaProject.ID}}, nil)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s: replay all: %d", mode, resp.StatusCode)
		}
		jobs, _ := url.ParseQuery(strings.SplitN(resp.Header.Get("Location"), "?", 2)[1])
		rows, _ := f.db.Store().DashboardJobs(ctx, jobs["id"])
		if len(rows) != 1 || rows[0].ProjectName != "alpha" {
			t.Fatalf("%s: replay all started %+v", mode, rows)
		}
		// Every POST is refused cross-origin, whatever the session.
		for _, p := range []string{"/deliveries/" + alpha[0] + "/redeliver", "/dead-letters/replay", "/endpoints",
			"/endpoints/" + alphaEP, "/endpoints/" + alphaEP + "/status", "/endpoints/" + alphaEP + "/test",
			"/endpoints/" + alphaEP + "/secret", "/endpoints/" + alphaEP + "/rotate-secret", "/logout"} {
			form := url.Values{"status": {"disabled"}, "url": {"https://example.com/x"}, "action": {"selected"}, "id": {alphaDL}}
			for _, hdr := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "http://evil.example"}} {
				if resp, _ := f.do(c, "POST", base+p, form, hdr); resp.StatusCode != http.StatusForbidden {
					t.Errorf("%s: cross-origin POST %s (%v): %d", mode, p, hdr, resp.StatusCode)
				}
			}
		}
	}
	if got := f.queue.manual(); len(got) != 0 {
		t.Fatalf("refused requests enqueued redeliveries: %v", got)
	}

	// The operator's session opens no portal page, and a portal session no
	// operator page.
	op := f.client()
	f.login(op)
	for _, p := range []string{"/portal/", "/portal/endpoints", "/portal/deliveries/" + alpha[0]} {
		if resp, _ := f.do(op, "GET", p, nil, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("operator cookie on %s: %d", p, resp.StatusCode)
		}
	}
	pc := f.client()
	base := f.openPortal(pc, f.portalLink("alpha", time.Hour))
	if base != "/portal" {
		t.Fatal(base)
	}
	for _, p := range []string{"/", "/endpoints", "/dead-letters", "/inspector", "/deliveries/" + alpha[0], "/event-types"} {
		if resp, _ := f.do(pc, "GET", p, nil, nil); resp.StatusCode != http.StatusSeeOther ||
			!strings.HasPrefix(resp.Header.Get("Location"), "/login") {
			t.Errorf("portal cookie on operator page %s: %d", p, resp.StatusCode)
		}
	}
	if resp, _ := f.do(pc, "POST", "/deliveries/"+alpha[0]+"/redeliver", url.Values{}, nil); resp.StatusCode != http.StatusSeeOther ||
		!strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Errorf("portal cookie on an operator POST: %d", resp.StatusCode)
	}
}

// TestPortalActsOnItsOwnProject redelivers, replays, manages endpoints and
// reads the catalog through the portal, without cookies, and checks each
// is recorded as the portal's.
func TestPortalActsOnItsOwnProject(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) {
		c.AllowPrivateNetworks = true
		c.PortalFrameAncestors = []string{"http://localhost:3000"}
	})
	ep, alpha := f.seed("alpha", 2, "order.paid")
	dl := f.deadLetter(alpha[1], webhookd.ReasonClientError)
	ctx := context.Background()
	p, _ := f.db.Store().ProjectByName(ctx, "alpha")
	if _, err := f.db.Store().CreateEventType(ctx, storage.EventType{ProjectID: p.ID, Name: "order.paid",
		Description: "An order was paid.", Schema: []byte(`{"type":"object"}`), Example: []byte(`{"order":"o_1"}`)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	c := noCookies()
	base := f.openPortal(c, f.portalLink("alpha", time.Hour))

	resp, body := f.do(c, "GET", base+"/deliveries/"+alpha[0], nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("delivery page: %d", resp.StatusCode)
	}
	if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "frame-ancestors http://localhost:3000;") ||
		resp.Header.Get("X-Frame-Options") != "" {
		t.Errorf("framable portal: CSP %q XFO %q", got, resp.Header.Get("X-Frame-Options"))
	}
	doc := parseHTML(t, body)
	action, _ := doc.Find(`form:has(#redeliver)`).Attr("action")
	if action != base+"/deliveries/"+alpha[0]+"/redeliver" || doc.Find("#send-to-inspector").Length() != 0 {
		t.Fatalf("redeliver form posts to %q", action)
	}
	doc.Find("a[href], form[action]").Each(func(_ int, s *goquery.Selection) {
		h, _ := s.Attr("href")
		if h == "" {
			h, _ = s.Attr("action")
		}
		if !strings.HasPrefix(h, base+"/") && h != "/static/dashboard.css" {
			t.Errorf("a link leaves the session: %q", h)
		}
	})
	if resp, _ = f.do(c, "POST", action, url.Values{}, nil); resp.StatusCode != http.StatusSeeOther ||
		resp.Header.Get("Location") != base+"/deliveries/"+alpha[0]+"?redelivery=requested" {
		t.Fatalf("redeliver: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := f.queue.manual(); len(got) != 1 || got[0][1] != alpha[0] || got[0][2] != "portal" {
		t.Fatalf("enqueued %v", got)
	}

	// Replay selected.
	resp, _ = f.do(c, "POST", base+"/dead-letters/replay", url.Values{"action": {"selected"}, "id": {dl}}, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), base+"/dead-letters?") {
		t.Fatalf("replay selected: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	// Endpoints: add one with a type from the catalog, change it, disable it, rotate its secret.
	resp, body = f.do(c, "GET", base+"/endpoints", nil, nil)
	if !strings.Contains(body, `value="order.paid"`) || !strings.Contains(body, ep) {
		t.Fatalf("endpoints page lacks the catalog or the endpoint: %d", resp.StatusCode)
	}
	resp, body = f.do(c, "POST", base+"/endpoints", url.Values{"url": {"ftp://x"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "form-error") {
		t.Fatalf("bad URL: %d", resp.StatusCode)
	}
	resp, body = f.do(c, "POST", base+"/endpoints", url.Values{"url": {"https://hooks.example.com/in"},
		"filter": {`{"data.total": {"$gt": "x", "$bad": 1}}`}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(parseHTML(t, body).Find("#form-error").Text(), "$bad") {
		t.Fatalf("bad filter: %d", resp.StatusCode)
	}
	resp, _ = f.do(c, "POST", base+"/endpoints", url.Values{"url": {"https://hooks.example.com/in"},
		"description": {"mine"}, "event_type": {"order.paid"}, "other_types": {"order.refunded, order.paid"}, "ordered": {"fifo"},
		"filter": {`{"data.total": {"$gt": 100}}`}}, nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, base+"/endpoints/ep_") {
		t.Fatalf("create: %d %q", resp.StatusCode, loc)
	}
	newID := strings.TrimSuffix(strings.TrimPrefix(loc, base+"/endpoints/"), "?saved=1")
	created, err := f.db.Store().GetEndpoint(ctx, p.ID, newID)
	if err != nil || created.URL != "https://hooks.example.com/in" || strings.Join(created.EventTypes, ",") != "order.paid,order.refunded" ||
		created.Ordering != webhookd.OrderingFIFO || !strings.Contains(string(created.Filter), `"$gt"`) {
		t.Fatalf("created %+v %v", created, err)
	}
	if _, body = f.do(c, "GET", base+"/endpoints/"+newID, nil, nil); !strings.Contains(parseHTML(t, body).Find("#filter").Text(), "data.total") {
		t.Fatal("the endpoint's page does not show its filter")
	}
	resp, _ = f.do(c, "POST", base+"/endpoints/"+newID, url.Values{"url": {"https://hooks.example.com/v2"}, "description": {"v2"}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("update: %d", resp.StatusCode)
	}
	updated, _ := f.db.Store().GetEndpoint(ctx, p.ID, newID)
	if updated.URL != "https://hooks.example.com/v2" || updated.Description != "v2" || len(updated.EventTypes) != 0 ||
		updated.Ordering != webhookd.OrderingNone || updated.Filter != nil {
		t.Fatalf("updated %+v", updated)
	}
	if resp, _ = f.do(c, "POST", base+"/endpoints/"+newID+"/status", url.Values{"status": {"disabled"}}, nil); resp.Header.Get("Location") != base+"/endpoints?done=disabled" {
		t.Fatalf("disable: %q", resp.Header.Get("Location"))
	}
	resp, body = f.do(c, "POST", base+"/endpoints/"+newID+"/rotate-secret", url.Values{}, nil)
	if resp.StatusCode != http.StatusOK || parseHTML(t, body).Find("#previous-secret").Text() != updated.Secret {
		t.Fatalf("rotate: %d", resp.StatusCode)
	}
	// A relay endpoint (`webhookd listen`'s) is made and shown like any.
	resp, _ = f.do(c, "POST", base+"/endpoints", url.Values{"url": {"relay://laptop"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), base+"/endpoints/ep_") {
		t.Fatalf("create a relay endpoint: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, body = f.do(c, "GET", base+"/endpoints", nil, nil); !strings.Contains(body, "relay://laptop") {
		t.Fatal("the endpoints page does not show the relay endpoint")
	}

	// The catalog, with schema and example.
	_, body = f.do(c, "GET", base+"/event-types", nil, nil)
	doc = parseHTML(t, body)
	if doc.Find(`[data-event-type="order.paid"] .example`).Length() != 1 || !strings.Contains(body, "An order was paid.") {
		t.Fatal("catalog page lacks the entry")
	}
}

// TestOperatorCatalogAndEndpointForm: the operator's dashboard shows every
// project's catalog and edits any project's endpoint with the same form;
// adding endpoints stays with the API and the portal.
func TestOperatorCatalogAndEndpointForm(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	alphaEP, _ := f.seed("alpha", 0, "a")
	f.seed("beta", 0, "a")
	ctx := context.Background()
	for _, name := range []string{"alpha", "beta"} {
		p, _ := f.db.Store().ProjectByName(ctx, name)
		if _, err := f.db.Store().CreateEventType(ctx, storage.EventType{ProjectID: p.ID, Name: name + ".created"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	c := f.client()
	f.login(c)
	_, body := f.do(c, "GET", "/event-types", nil, nil)
	doc := parseHTML(t, body)
	if doc.Find(`[data-event-type="alpha.created"]`).Length() != 1 || doc.Find(`[data-event-type="beta.created"]`).Length() != 1 {
		t.Fatal("the operator's catalog page lacks a project's types")
	}
	resp, body := f.do(c, "GET", "/endpoints/"+alphaEP, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `value="alpha.created"`) || strings.Contains(body, "beta.created") {
		t.Fatalf("endpoint page: %d, or it offers another project's types", resp.StatusCode)
	}
	resp, body = f.do(c, "POST", "/endpoints/"+alphaEP, url.Values{"url": {"http://127.0.0.1:9/x"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "loopback") {
		t.Fatalf("a loopback URL without AllowPrivateNetworks: %d", resp.StatusCode)
	}
	resp, _ = f.do(c, "POST", "/endpoints/"+alphaEP, url.Values{"url": {"https://example.com/in"}, "event_type": {"alpha.created"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/endpoints/"+alphaEP+"?saved=1" {
		t.Fatalf("save: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ = f.do(c, "POST", "/endpoints", url.Values{"url": {"https://example.com/in"}}, nil); resp.StatusCode == http.StatusSeeOther {
		t.Fatal("the operator's dashboard added an endpoint")
	}
}
