package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/webhookd/webhookd/internal/testenv"
)

// TestPortalLinkCommand: portal-link prints a link to the dashboard's
// address (a wildcard host as 127.0.0.1, as everything else says) for a known project and refuses an unknown one or a bad ttl.
func TestPortalLinkCommand(t *testing.T) {
	t.Parallel()
	_, dbURL := testenv.Schema(t)
	_, redisURL := testenv.Redis(t)
	vars := map[string]string{"WEBHOOKD_DATABASE_URL": dbURL, "WEBHOOKD_REDIS_URL": redisURL,
		"WEBHOOKD_DASHBOARD_ADDR": ":9081"}
	ctx := context.Background()
	for _, args := range [][]string{{"migrate"}, {"keys", "create", "--project", "acme"}} {
		if err := run(ctx, args, env(vars), io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"portal-link", "--project", "acme", "--ttl", "1h"}, env(vars), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if link := strings.TrimSpace(out.String()); !strings.HasPrefix(link, "http://127.0.0.1:9081/portal/open/wpl_") {
		t.Fatalf("link %q", link)
	}
	vars["WEBHOOKD_PORTAL_BASE_URL"] = "https://hooks.example.com/"
	out.Reset()
	if err := run(ctx, []string{"portal-link", "--project", "acme"}, env(vars), &out, io.Discard); err != nil ||
		!strings.HasPrefix(out.String(), "https://hooks.example.com/portal/open/wpl_") {
		t.Fatalf("with WEBHOOKD_PORTAL_BASE_URL: %q %v", out.String(), err)
	}
	for _, args := range [][]string{{"portal-link", "--project", "nope"}, {"portal-link"},
		{"portal-link", "--project", "acme", "--ttl", "48h"}} {
		if err := run(ctx, args, env(vars), io.Discard, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// framePage serves a page that frames the URL given in ?src=, as an
// integrator's app embeds the portal.
func framePage(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<!DOCTYPE html><html><head><title>Integrator app</title></head><body><h1>My app</h1>`+
			`<iframe id="portal" width="1200" height="800" onload="document.body.dataset.loaded = 'yes'" src="`+strings.ReplaceAll(r.URL.Query().Get("src"), `"`, "")+`"></iframe></body></html>`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// frameTarget waits for the cross-site iframe whose URL starts with prefix
// (Chrome runs it as a target of its own) and attaches to it for as long as
// t runs; ending the attachment detaches, leaving the frame (and its tab)
// open.
func frameTarget(t *testing.T, ctx context.Context, prefix string) context.Context {
	t.Helper()
	var id target.ID
	eventually(t, "the framed portal", func() bool {
		infos, err := chromedp.Targets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range infos {
			if info.Type == "iframe" && strings.HasPrefix(info.URL, prefix) {
				id = info.TargetID
				return true
			}
		}
		return false
	})
	fctx, cancel := chromedp.NewContext(ctx, chromedp.WithTargetID(id), chromedp.WithDetachOnCancel())
	t.Cleanup(cancel)
	// Attach now, on a context that lives as long as t: the first Run's
	// context owns the attachment.
	if err := chromedp.Do(fctx); err != nil {
		t.Fatalf("attach to the frame: %v", err)
	}
	return fctx
}

// TestPortalFramedInBrowser: a page of an allowed origin frames the portal
// in Chromium with third-party cookies blocked and scripts off in the
// frame; opening a link inside the frame logs in, and Redeliver and Rotate
// secret work there. A page of another origin cannot frame it.
func TestPortalFramedInBrowser(t *testing.T) {
	t.Parallel()
	host := framePage(t)
	hostPort := host.URL[strings.LastIndex(host.URL, ":")+1:]
	allowed := "http://localhost:" + hostPort // another site than the portal's 127.0.0.1
	m, key := startMain(t, Roles{API: true, Worker: true, Ops: true}, func(c *Config) {
		c.AllowPrivateNetworks, c.AdminToken = true, dashboardToken
		c.PortalFrameAncestors = allowed
	})
	rc := newReceiver(t)
	apiCall := func(method, path, body string) map[string]any {
		t.Helper()
		return callAPI(t, m.APIAddr, key, method, path, body, method == "POST")
	}
	ep := apiCall("POST", "/v1/endpoints", `{"url":"`+rc.URL+`/ok"}`)
	epID, oldSecret := ep["id"].(string), ep["secret"].(string)
	ev := apiCall("POST", "/v1/events", `{"type":"invoice.paid","data":{"n":1}}`)
	dlvID := ev["deliveries"].([]any)[0].(map[string]any)["id"].(string)
	eventually(t, "the first attempt", func() bool { return len(rc.requestIDs("/ok")) == 1 })
	portal := "http://" + m.OpsAddr
	link := func() string {
		url := apiCall("POST", "/v1/portal-sessions", `{"ttl":"10m"}`)["url"].(string)
		return portal + url[strings.Index(url, "/portal/open/"):] // the test's dashboard port is chosen at start
	}

	ctx := browser(t)
	tab := ctx
	if _, err := chromedp.Call(step(t, ctx), network.SetCookieControls,
		network.SetCookieControlsParams{EnableThirdPartyCookieRestriction: true}); err != nil {
		t.Fatalf("block third-party cookies: %v", err)
	}

	var frame context.Context
	outer := t
	t.Run("an allowed origin frames the portal and a link logs in inside it", func(t *testing.T) {
		ctx := step(t, ctx)
		if err := chromedp.Do(ctx, chromedp.Navigate(allowed+"/?src="+link()), chromedp.WaitVisible(chromedp.ID("portal"))); err != nil {
			t.Fatal(err)
		}
		frame = frameTarget(outer, tab, portal+"/portal/")
		fctx := step(t, frame)
		if err := chromedp.Do(fctx, chromedp.WaitVisible(chromedp.ID("project-name"))); err != nil {
			t.Fatal(err)
		}
		// No cookie reached the frame: the session rides in the path.
		loc, err := chromedp.Run(fctx, chromedp.Location())
		if err != nil || !strings.HasPrefix(loc, portal+"/portal/s/") {
			t.Fatalf("frame at %q (%v): want the session in the path", loc, err)
		}
		if name, _ := chromedp.Run(fctx, chromedp.Text(chromedp.ID("project-name"))); name != "e2e" {
			t.Fatalf("project on top %q", name)
		}
		// The rest runs with scripts off in the frame.
		if err := chromedp.Do(fctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
			return err
		})); err != nil {
			t.Fatal(err)
		}
		screenshot(t, ctx, "portal-framed")
	})

	t.Run("redeliver inside the frame", func(t *testing.T) {
		fctx := step(t, frame)
		if err := chromedp.Do(fctx, chromedp.Click(chromedp.CSS(`a.delivery-id`)), chromedp.WaitVisible(chromedp.ID("redeliver")),
			chromedp.Click(chromedp.ID("redeliver")), chromedp.WaitVisible(chromedp.ID("flash"))); err != nil {
			t.Fatal(err)
		}
		if got, _ := chromedp.Run(fctx, chromedp.Text(chromedp.ID("flash"))); !strings.Contains(got, "Redelivery requested") {
			t.Fatalf("flash %q", got)
		}
		if got, _ := chromedp.Run(fctx, chromedp.Text(chromedp.ID("delivery-id"))); got != dlvID {
			t.Fatalf("delivery %q, want %s", got, dlvID)
		}
		eventually(t, "the receiver gets the redelivery", func() bool { return len(rc.requestIDs("/ok")) == 2 })
		screenshot(t, ctx, "portal-framed-redelivered")
	})

	t.Run("rotate the secret inside the frame", func(t *testing.T) {
		fctx := step(t, frame)
		if err := chromedp.Do(fctx, chromedp.Click(chromedp.CSS(`nav a[href$="/endpoints"]`)),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-endpoint-id="`+epID+`"] .reveal-secret`))); err != nil {
			t.Fatal(err)
		}
		screenshot(t, ctx, "portal-framed-endpoints")
		if err := chromedp.Do(fctx, chromedp.Click(chromedp.CSS(`tr[data-endpoint-id="`+epID+`"] .reveal-secret`)),
			chromedp.WaitVisible(chromedp.ID("rotate-secret")), chromedp.Click(chromedp.ID("rotate-secret")),
			chromedp.WaitVisible(chromedp.ID("previous-secret"))); err != nil {
			t.Fatal(err)
		}
		prev, _ := chromedp.Run(fctx, chromedp.Text(chromedp.ID("previous-secret")))
		cur, _ := chromedp.Run(fctx, chromedp.Text(chromedp.ID("secret")))
		stored := apiCall("GET", "/v1/endpoints/"+epID+"/secret", "")
		if prev != oldSecret || cur == oldSecret || stored["secret"] != cur {
			t.Fatalf("after rotating: page %q (previous %q), API %v", cur, prev, stored["secret"])
		}
		screenshot(t, ctx, "portal-framed-rotated")
	})

	t.Run("another origin cannot frame it", func(t *testing.T) {
		ctx := step(t, ctx)
		other := host.URL // 127.0.0.1: not listed
		if err := chromedp.Do(ctx, chromedp.Navigate(other+"/?src="+link()), chromedp.WaitVisible(chromedp.ID("portal"))); err != nil {
			t.Fatal(err)
		}
		// The frame's load event fires once its document (or the error
		// page that replaces a refused one) is in.
		eventually(t, "the frame loads or is refused", func() bool {
			loaded, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.body.dataset.loaded === "yes"`))
			return err == nil && loaded
		})
		shown := false
		infos, err := chromedp.Targets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range infos {
			if info.Type != "iframe" {
				continue
			}
			fctx, cancel := chromedp.NewContext(ctx, chromedp.WithTargetID(info.TargetID), chromedp.WithDetachOnCancel())
			has, err := chromedp.Run(step(t, fctx), chromedp.Evaluate[bool](`document.getElementById("project-name") !== null`))
			cancel()
			shown = shown || (err == nil && has)
		}
		if shown {
			t.Fatal("a page of another origin shows the portal in a frame")
		}
		screenshot(t, ctx, "portal-frame-refused")
	})
}
