package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/webhookd/webhookd/internal/testenv"
)

const dashboardToken = "browser-test-admin-token-0123456789"

// receiver is a loopback webhook receiver that remembers the X-Request-Id
// of every request, by path, and answers each path its own way.
type receiver struct {
	*httptest.Server
	badHeals atomic.Bool // /bad answers 200 from now on
	mu       sync.Mutex
	seen     map[string][]string // path → X-Request-Id of each request
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{seen: map[string][]string{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		rc.mu.Lock()
		rc.seen[r.URL.Path] = append(rc.seen[r.URL.Path], r.Header.Get("X-Request-Id"))
		rc.mu.Unlock()
		if r.URL.Path == "/bad" && !rc.badHeals.Load() {
			http.Error(w, "no such customer", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"received":true,"by":"loopback receiver"}`)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requestIDs(path string) []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.seen[path]...)
}

// browser starts headless Chromium for the test and returns a tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("WEBHOOKD_TEST_CHROMIUM")
	if path == "" {
		var err error
		if path, err = exec.LookPath("chromium"); err != nil {
			t.Fatalf("no chromium on PATH (apt-get install chromium, or set WEBHOOKD_TEST_CHROMIUM): %v", err)
		}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	// Start the browser and open the tab now, on a context that lives as
	// long as the test: the first run's context owns them.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// step bounds one browser step, so a page that never comes fails the test
// instead of hanging it.
func step(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// screenshot saves what the tab shows under the test's artifact directory
// (kept with go test -artifacts).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	file := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", file)
}

// eventually polls cond every 50 ms until it holds or 20 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDashboardInBrowser drives the dashboard of a real `webhookd all` in
// headless Chromium: a wrong token is refused, the admin logs in, filters by
// status, opens a delivery (its payload shown as text, its response body and
// request id), redelivers it (the receiver gets a new attempt with a new
// X-Request-Id), a form posted from another origin is refused and changes
// nothing, the dead letters are replayed in bulk by a job whose progress
// page refreshes itself until it has finished, and a test event goes out
// from the endpoints page. The overview chart shows the attempts, and Send
// to inspector shows signature valid while the endpoint gets nothing.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	m, key := startMain(t, Roles{API: true, Worker: true, Ops: true}, func(c *Config) {
		c.AllowPrivateNetworks, c.AdminToken = true, dashboardToken
		// A catalog example's preview, not the budget, is tested here:
		// the 50 ms default ran out under -race in the dashboard package's
		// twin of this test (d3b0128).
		c.TransformTimeout = 5 * time.Second
	})
	rc := newReceiver(t)
	api := func(method, path, body string) map[string]any {
		t.Helper()
		return callAPI(t, m.APIAddr, key, method, path, body, method == "POST")
	}
	epOK := api("POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q}`, rc.URL+"/ok"))["id"].(string)
	epBad := api("POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q}`, rc.URL+"/bad"))["id"].(string)
	const xss = `<img src=x onerror=alert(1)>`
	okEvent := api("POST", "/v1/events", fmt.Sprintf(`{"type":"invoice.paid","data":{"note":%q},"endpoint_ids":[%q]}`, xss, epOK))
	badEvent := api("POST", "/v1/events", fmt.Sprintf(`{"type":"user.created","data":{},"endpoint_ids":[%q]}`, epBad))
	okID := okEvent["deliveries"].([]any)[0].(map[string]any)["id"].(string)
	badID := badEvent["deliveries"].([]any)[0].(map[string]any)["id"].(string)
	status := func(id string) string { return api("GET", "/v1/deliveries/"+id, "")["status"].(string) }
	eventually(t, "first attempts", func() bool { return status(okID) == "succeeded" && status(badID) == "dead_letter" })

	ctx := browser(t)
	dash := "http://" + m.OpsAddr
	text := func(ctx context.Context, sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	rowIDs := func(ctx context.Context) []string {
		t.Helper()
		ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll("tbody tr")].map(tr => tr.dataset.deliveryId)`))
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}

	t.Run("wrong token is refused", func(t *testing.T) {
		ctx := step(t, ctx)
		if err := chromedp.Do(ctx, chromedp.Navigate(dash+"/"), chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.SendKeys(chromedp.ID("token"), "not-the-token-at-all")); err != nil {
			t.Fatal(err)
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("login")))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusUnauthorized || !strings.Contains(text(ctx, `[role="alert"]`), "not the admin token") {
			t.Fatalf("wrong token: status %d", resp.Status)
		}
		screenshot(t, ctx, "wrong-token")
	})

	t.Run("log in", func(t *testing.T) {
		ctx := step(t, ctx)
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token"), dashboardToken)); err != nil {
			t.Fatal(err)
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("login")))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusOK || !strings.HasSuffix(resp.URL, "/") {
			t.Fatalf("after login: %d %s", resp.Status, resp.URL)
		}
		if got := rowIDs(ctx); fmt.Sprint(got) != fmt.Sprint([]string{badID, okID}) {
			t.Fatalf("rows %v, want both deliveries, newest first", got)
		}
		screenshot(t, ctx, "deliveries")
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
			t.Fatal(err)
		}
		screenshot(t, ctx, "deliveries-phone")
		// Back to the desktop size (ResetViewport keeps the phone's width).
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the overview chart shows the attempts of the last 24 h", func(t *testing.T) {
		ctx := step(t, ctx)
		if err := chromedp.Do(ctx, chromedp.Navigate(dash+"/"), chromedp.WaitVisible(chromedp.ID("overview-chart"))); err != nil {
			t.Fatal(err)
		}
		for sel, want := range map[string]string{"#total-succeeded": "1", "#total-failed": "1", "#total-dead": "1"} {
			if got := text(ctx, sel); got != want {
				t.Errorf("%s = %q, want %q", sel, got, want)
			}
		}
		// One bar each, drawn on the server: the page runs no script.
		bars, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll("#overview-chart path")].map(p => p.getAttribute("class") + ":" + (p.getBBox().height > 0))`))
		if err != nil || fmt.Sprint(bars) != "[s-ok:true s-failed:true s-dead:true]" {
			t.Fatalf("bars %v (%v)", bars, err)
		}
		if got := text(ctx, "#backlog"); !strings.Contains(got, "0 due now") {
			t.Errorf("backlog %q", got)
		}
		screenshot(t, ctx, "overview")
	})

	t.Run("filter by status", func(t *testing.T) {
		ctx := step(t, ctx)
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("f-status"), "dead_letter")); err != nil {
			t.Fatal(err)
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("filter")))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(resp.URL, "status=dead_letter") {
			t.Fatalf("the filter is not in the URL: %s", resp.URL)
		}
		if got := rowIDs(ctx); fmt.Sprint(got) != fmt.Sprint([]string{badID}) {
			t.Fatalf("dead letters %v, want %s alone", got, badID)
		}
		if badge := text(ctx, `tbody .badge`); badge != "dead letter" {
			t.Errorf("badge %q", badge)
		}
		screenshot(t, ctx, "filtered-dead-letters")
	})

	t.Run("a delivery shows its payload as text, response body and request id", func(t *testing.T) {
		ctx := step(t, ctx)
		if err := chromedp.Do(ctx, chromedp.Navigate(dash+"/"), chromedp.WaitVisible(chromedp.CSS("tbody tr"))); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`a[href="/deliveries/`+okID+`"]`))); err != nil {
			t.Fatal(err)
		}
		first := rc.requestIDs("/ok")
		if len(first) != 1 {
			t.Fatalf("receiver got %v", first)
		}
		if got := text(ctx, ".attempt .request-id"); got != first[0] {
			t.Errorf("request id %q, receiver saw %q", got, first[0])
		}
		if got := text(ctx, ".attempt .response-body"); got != `{"received":true,"by":"loopback receiver"}` {
			t.Errorf("response body %q", got)
		}
		if got := text(ctx, "#payload"); !strings.Contains(got, xss) {
			t.Errorf("payload %q does not show the markup as text", got)
		}
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("img, script").length`))
		if err != nil || n != 0 {
			t.Fatalf("%d img/script elements on the page (%v)", n, err)
		}
		screenshot(t, ctx, "delivery")
	})

	t.Run("redeliver makes a new attempt with a new request id", func(t *testing.T) {
		ctx := step(t, ctx)
		if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("redeliver"))); err != nil {
			t.Fatal(err)
		}
		if got := text(ctx, "#flash"); !strings.Contains(got, "Redelivery requested") {
			t.Fatalf("flash %q", got)
		}
		var ids []string
		eventually(t, "the receiver gets the redelivery", func() bool { ids = rc.requestIDs("/ok"); return len(ids) == 2 })
		if ids[1] == ids[0] || !strings.HasPrefix(ids[1], "req_") {
			t.Fatalf("request ids %v: want a new one", ids)
		}
		eventually(t, "the attempt is recorded", func() bool {
			d := api("GET", "/v1/deliveries/"+okID, "")
			return len(d["attempts"].([]any)) == 2
		})
		if err := chromedp.Do(ctx, chromedp.Navigate(dash+"/deliveries/"+okID),
			chromedp.WaitVisible(chromedp.CSS(`li.attempt[data-request-id="`+ids[1]+`"]`))); err != nil {
			t.Fatal(err)
		}
		if got := text(ctx, `li.attempt[data-request-id="`+ids[1]+`"] .trigger`); got != "manual" {
			t.Errorf("trigger %q", got)
		}
		screenshot(t, ctx, "redelivered")
	})

	t.Run("redeliver works with JavaScript turned off", func(t *testing.T) {
		// A second tab of the same browser (so the same login), with the
		// page's scripts switched off: every action is a plain form.
		tab, cancel := chromedp.NewContext(ctx)
		defer cancel()
		tab = step(t, tab)
		err := chromedp.Do(tab, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
			return err
		}), chromedp.Navigate(dash+"/deliveries/"+okID), chromedp.WaitVisible(chromedp.ID("redeliver")))
		if err != nil {
			t.Fatal(err)
		}
		before := len(rc.requestIDs("/ok"))
		resp, err := chromedp.RunResponse(tab, chromedp.Click(chromedp.ID("redeliver")))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusOK || !strings.Contains(resp.URL, "redelivery=requested") {
			t.Fatalf("redeliver without JavaScript: %d %s", resp.Status, resp.URL)
		}
		eventually(t, "the receiver gets the redelivery", func() bool { return len(rc.requestIDs("/ok")) == before+1 })
		// The receiver has the request before its attempt is recorded (the
		// record follows the response): the next step reads the delivery as
		// the state Send to inspector must leave unchanged.
		eventually(t, "the attempt is recorded", func() bool {
			d := api("GET", "/v1/deliveries/"+okID, "")
			return len(d["attempts"].([]any)) == before+1
		})
		screenshot(t, tab, "redelivered-without-javascript")
	})

	t.Run("send to inspector shows signature valid and the endpoint gets nothing", func(t *testing.T) {
		ctx := step(t, ctx)
		before := api("GET", "/v1/deliveries/"+okID, "")
		sent := len(rc.requestIDs("/ok"))
		if err := chromedp.Do(ctx, chromedp.Navigate(dash+"/deliveries/"+okID),
			chromedp.WaitVisible(chromedp.ID("send-to-inspector"))); err != nil {
			t.Fatal(err)
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("send-to-inspector")))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusOK || !strings.Contains(resp.URL, "/inspector/requests/ir_") {
			t.Fatalf("send to inspector: %d %s", resp.Status, resp.URL)
		}
		if got := text(ctx, ".capture .badge"); got != "signature valid" {
			t.Fatalf("check %q", got)
		}
		// The body as sent (encoding/json writes < and > as \u003c and \u003e).
		if got := text(ctx, ".capture .request-body"); !strings.Contains(got, `\u003cimg src=x onerror=alert(1)\u003e`) {
			t.Errorf("body %q does not show the event's data as sent", got)
		}
		if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("img, script").length`)); err != nil || n != 0 {
			t.Errorf("%d img/script elements on the inspector page (%v)", n, err)
		}
		screenshot(t, ctx, "inspector")
		after := api("GET", "/v1/deliveries/"+okID, "")
		attempts := after["attempts"].([]any)
		last := attempts[len(attempts)-1].(map[string]any)
		if last["trigger"] != "inspector" || after["status"] != before["status"] ||
			after["attempts_count"] != before["attempts_count"] || after["updated_at"] != before["updated_at"] {
			t.Errorf("after send to inspector: status %v, %v attempts, last trigger %v (before: %v, %v)",
				after["status"], after["attempts_count"], last["trigger"], before["status"], before["attempts_count"])
		}
		if got := len(rc.requestIDs("/ok")); got != sent {
			t.Errorf("the real endpoint got %d requests, want none", got-sent)
		}
	})

	t.Run("a cross-origin form POST is refused and changes nothing", func(t *testing.T) {
		ctx := step(t, ctx)
		// Another origin on the same host: same site, so the SameSite=Strict
		// cookie goes along, and only the cross-origin check stands between.
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `<!DOCTYPE html><form method="post" action="%s/deliveries/%s/redeliver"><button id="go">Win a prize</button></form>`,
				dash, badID)
		}))
		defer evil.Close()
		before := api("GET", "/v1/deliveries/"+badID, "")
		if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.ID("go"))); err != nil {
			t.Fatal(err)
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("go")))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusForbidden || !strings.Contains(text(ctx, "h1"), "Cross-origin request refused") {
			t.Fatalf("cross-origin POST: %d", resp.Status)
		}
		screenshot(t, ctx, "cross-origin-refused")
		var pending *string
		if err := m.DB.Pool().QueryRow(context.Background(), `SELECT manual_request_id FROM deliveries WHERE id = $1`,
			badID).Scan(&pending); err != nil || pending != nil {
			t.Fatalf("a redelivery was recorded: %v (%v)", pending, err)
		}
		after := api("GET", "/v1/deliveries/"+badID, "")
		if len(after["attempts"].([]any)) != len(before["attempts"].([]any)) || len(rc.requestIDs("/bad")) != 1 {
			t.Fatalf("attempts changed: before %v after %v", before["attempts"], after["attempts"])
		}
	})

	t.Run("replay all matching dead letters and watch the job finish", func(t *testing.T) {
		ctx := step(t, ctx)
		rc.badHeals.Store(true)
		if err := chromedp.Do(ctx, chromedp.Navigate(dash+"/dead-letters"),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-dead-letter-id]`))); err != nil {
			t.Fatal(err)
		}
		screenshot(t, ctx, "dead-letters")
		if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("replay-all"))); err != nil {
			t.Fatal(err)
		}
		// The page refreshes itself (a meta refresh, no script) until the
		// job has finished; read it until it says so.
		var status string
		eventually(t, "the job page shows the job finished", func() bool {
			status, _ = chromedp.Run(ctx, chromedp.Evaluate[string](
				`(document.querySelector(".job") || {dataset: {}}).dataset.status || ""`))
			return status == "succeeded"
		})
		counts := text(ctx, ".job .job-counts")
		if !strings.Contains(counts, "1 done · 0 failed · 1 total") {
			t.Fatalf("job counts %q", counts)
		}
		if got := rc.requestIDs("/bad"); len(got) != 2 || got[1] == got[0] {
			t.Fatalf("receiver got %v", got)
		}
		screenshot(t, ctx, "replay-job")
		if status := api("GET", "/v1/deliveries/"+badID, "")["status"]; status != "succeeded" {
			t.Errorf("replayed delivery is %v", status)
		}
	})

	t.Run("send a test event from the endpoints page", func(t *testing.T) {
		ctx := step(t, ctx)
		row := `tr[data-endpoint-id="` + epOK + `"]`
		if err := chromedp.Do(ctx, chromedp.Navigate(dash+"/endpoints"), chromedp.WaitVisible(chromedp.CSS(row))); err != nil {
			t.Fatal(err)
		}
		screenshot(t, ctx, "endpoints")
		// The max field shows 1000, the highest max, whole; the Edit link
		// stands on the buttons' baseline (a zero-height inline-block sits
		// on the baseline of the text it is put in).
		layout, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`(() => {
			const row = document.querySelector(`+strconv.Quote(row)+`);
			const max = row.querySelector("input[name=max_in_flight]");
			max.value = "1000";
			const baseline = (el) => {
				const m = document.createElement("span");
				m.style.cssText = "display:inline-block;width:0;height:0;vertical-align:baseline";
				el.appendChild(m);
				const y = m.getBoundingClientRect().top;
				m.remove();
				return y;
			};
			return {overflow: max.scrollWidth - max.clientWidth,
				edit: baseline(row.querySelector("a.edit")), button: baseline(row.querySelector("button.disable"))};
		})()`))
		if err != nil {
			t.Fatal(err)
		}
		if layout["overflow"] > 0 {
			t.Errorf("the max field is %.0fpx too narrow for 1000", layout["overflow"])
		}
		if d := layout["edit"] - layout["button"]; d > 1 || d < -1 {
			t.Errorf("the Edit link's baseline is %.1fpx off the buttons'", d)
		}
		before := len(rc.requestIDs("/ok"))
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(row+" .send-test")))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusOK || !strings.Contains(resp.URL, "/deliveries/dlv_") {
			t.Fatalf("after send test: %d %s", resp.Status, resp.URL)
		}
		if got := text(ctx, "#payload"); !strings.Contains(got, "This is a test event from webhookd") {
			t.Errorf("test payload %q", got)
		}
		eventually(t, "the receiver gets the test event", func() bool { return len(rc.requestIDs("/ok")) == before+1 })

		// The signing secret shows only after an explicit click.
		if err := chromedp.Do(ctx, chromedp.Navigate(dash+"/endpoints"), chromedp.WaitVisible(chromedp.CSS(row))); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(row+" .reveal-secret"))); err != nil {
			t.Fatal(err)
		}
		if got := text(ctx, "#secret"); !strings.HasPrefix(got, "whsec_") {
			t.Fatalf("secret %q", got)
		}
		screenshot(t, ctx, "secret")
	})

	t.Run("preview a transformation on a catalog example picked from the list", func(t *testing.T) {
		ctx := step(t, ctx)
		api("POST", "/v1/event-types", `{"name":"order.updated","example":{"id":"o_7","status":"shipped"}}`)
		const script = `function handler(w) { w.payload = {ref: w.payload.data.id}; return w }`
		if err := chromedp.Do(ctx, chromedp.Navigate(dash+"/endpoints/"+epOK), chromedp.WaitVisible(chromedp.ID("preview-example")),
			chromedp.SetValue(chromedp.ID("preview-example"), "order.updated"),
			chromedp.SetValue(chromedp.CSS(`textarea[name="transformation"]`), script)); err != nil {
			t.Fatal(err)
		}
		// The pane's button posts the form as it is: no script of the page's.
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("preview-run")))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusOK {
			t.Fatalf("preview: %d %s", resp.Status, resp.URL)
		}
		if got := text(ctx, "#preview-body"); !strings.Contains(got, `"ref": "o_7"`) {
			t.Fatalf("preview body %q; want the transformed example", got)
		}
		if got := text(ctx, "#preview-original"); !strings.Contains(got, `"type": "order.updated"`) {
			t.Errorf("original %q; want the example's event", got)
		}
		screenshot(t, ctx, "preview-catalog-example")
		if e := api("GET", "/v1/endpoints/"+epOK, ""); e["transformation"] != nil {
			t.Errorf("the preview saved the transformation: %v", e["transformation"])
		}
	})
}

// TestInspectorWithPrivateNetworksDisallowed: a process that refuses
// private addresses (and runs no worker, so the endpoint is never
// contacted) still sends to its own inspector, and the inspector page shows
// every header a receiver would get and signature valid.
func TestInspectorWithPrivateNetworksDisallowed(t *testing.T) {
	t.Parallel()
	m, key := startMain(t, Roles{API: true, Ops: true}, func(c *Config) {
		c.AllowPrivateNetworks, c.AdminToken = false, dashboardToken
	})
	api := func(method, path, body string) map[string]any {
		t.Helper()
		return callAPI(t, m.APIAddr, key, method, path, body, method == "POST")
	}
	ep := api("POST", "/v1/endpoints", `{"url":"https://receiver.invalid/hook"}`)["id"].(string)
	ev := api("POST", "/v1/events", fmt.Sprintf(`{"type":"order.created","data":{"order_id":"ord_1"},"endpoint_ids":[%q]}`, ep))
	id := ev["deliveries"].([]any)[0].(map[string]any)["id"].(string)

	ctx := step(t, browser(t))
	dash := "http://" + m.OpsAddr
	err := chromedp.Do(ctx, chromedp.Navigate(dash+"/deliveries/"+id), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), dashboardToken), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("send-to-inspector")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("send-to-inspector"))); err != nil {
		t.Fatal(err)
	}
	headers, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries(
		[...document.querySelectorAll(".capture table.headers tr")].map(tr => [tr.querySelector("th").textContent, tr.querySelector("td").textContent]))`))
	if err != nil {
		t.Fatal(err)
	}
	check, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(".capture .badge")))
	if err != nil || check != "signature valid" {
		t.Fatalf("check %q (%v)", check, err)
	}
	screenshot(t, ctx, "inspector-private-networks-disallowed")
	for _, h := range []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature", "X-Event-Id", "X-Event-Type",
		"X-Delivery-Attempt", "X-Request-Id", "Content-Type", "User-Agent", "Content-Length", "Host"} {
		if headers[h] == "" {
			t.Errorf("header %s missing from %v", h, headers)
		}
	}
	if headers["Webhook-Id"] != ev["id"] || headers["X-Delivery-Attempt"] != "1" {
		t.Errorf("webhook-id %q, attempt %q", headers["Webhook-Id"], headers["X-Delivery-Attempt"])
	}
	d := api("GET", "/v1/deliveries/"+id, "")
	if d["status"] != "pending" || d["attempts_count"] != float64(0) || len(d["attempts"].([]any)) != 1 {
		t.Errorf("delivery after send to inspector: %v, %v attempts counted, %d logged", d["status"], d["attempts_count"],
			len(d["attempts"].([]any)))
	}
}

// TestScreenshotsForDocs makes the README's screenshots of the deliveries
// page and the inspector when WEBHOOKD_DOCS_SCREENSHOTS names a directory
// (go test ./cmd/webhookd -run ScreenshotsForDocs), and does nothing
// otherwise: a day of traffic in the chart's rollup, events fanned out to
// a receiver that answers 200, one that answers 503 and one that answers
// 404.
func TestScreenshotsForDocs(t *testing.T) {
	dir := os.Getenv("WEBHOOKD_DOCS_SCREENSHOTS")
	if dir == "" {
		t.Skip("set WEBHOOKD_DOCS_SCREENSHOTS=docs to make the README's screenshots")
	}
	m, key := startMain(t, Roles{API: true, Worker: true, Ops: true}, func(c *Config) {
		c.AllowPrivateNetworks, c.AdminToken, c.RetrySchedule = true, dashboardToken, "1h"
	})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/crm":
			http.Error(w, "upstream timeout", http.StatusServiceUnavailable)
		case "/legacy":
			http.Error(w, "no such route", http.StatusNotFound)
		default:
			io.WriteString(w, `{"ok":true}`)
		}
	}))
	defer rc.Close()
	api := func(method, path, body string) map[string]any {
		t.Helper()
		return callAPI(t, m.APIAddr, key, method, path, body, method == "POST")
	}
	for _, p := range []string{"/orders", "/crm", "/legacy"} {
		api("POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q}`, rc.URL+p))
	}
	var last string
	for i, typ := range []string{"order.created", "invoice.paid", "customer.updated", "order.refunded"} {
		ev := api("POST", "/v1/events", fmt.Sprintf(`{"type":%q,"data":{"n":%d}}`, typ, i))
		last = ev["deliveries"].([]any)[0].(map[string]any)["id"].(string)
	}
	eventually(t, "the first attempts", func() bool {
		var waiting int
		m.DB.Pool().QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE attempts_count = 0`).Scan(&waiting)
		return waiting == 0
	})
	// A day of traffic, rising in the afternoon, with an outage at 13:00.
	if _, err := m.DB.Pool().Exec(context.Background(), `INSERT INTO attempt_minutes
		SELECT minute, (40 + 25 * sin(extract(epoch FROM minute) / 13751))::int,
			CASE WHEN extract(hour FROM minute) = 13 AND extract(minute FROM minute) < 20 THEN 30 ELSE (random() * 3)::int END,
			(random() < 0.02)::int
		FROM generate_series(date_trunc('minute', now()) - interval '24 hours', date_trunc('minute', now()) - interval '6 minutes',
			interval '1 minute') minute`); err != nil {
		t.Fatal(err)
	}
	ctx := step(t, browser(t))
	dash := "http://" + m.OpsAddr
	err := chromedp.Do(ctx, chromedp.Navigate(dash+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), dashboardToken), chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("overview-chart")))
	if err != nil {
		t.Fatal(err)
	}
	save := func(name string) {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	save("dashboard-deliveries.png")
	err = chromedp.Do(ctx, chromedp.Navigate(dash+"/deliveries/"+last), chromedp.WaitVisible(chromedp.ID("send-to-inspector")),
		chromedp.Click(chromedp.ID("send-to-inspector")), chromedp.WaitVisible(chromedp.CSS(".capture .badge")))
	if err != nil {
		t.Fatal(err)
	}
	save("dashboard-inspector.png")
}

// lockedBuffer is a log sink the test can read while the process writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestGeneratedAdminTokenIsPrintedOnceAndLogsIn: without
// WEBHOOKD_ADMIN_TOKEN the process makes a token, prints it once in its log,
// and the dashboard takes it (and nothing else).
func TestGeneratedAdminTokenIsPrintedOnceAndLogsIn(t *testing.T) {
	t.Parallel()
	name, _ := testenv.Schema(t)
	_, redisURL := testenv.Redis(t)
	cfg := DefaultConfig()
	cfg.DatabaseURL, cfg.RedisURL, cfg.DashboardAddr = testenv.DatabaseURL(), redisURL, "127.0.0.1:0"
	var logs lockedBuffer
	m := NewMain(cfg, &logs)
	m.SearchPath = name
	t.Cleanup(m.Close)
	ctx := context.Background()
	if err := m.OpenDB(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.DB.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, Roles{Ops: true}); err != nil {
		t.Fatal(err)
	}
	token := m.Config.AdminToken
	if len(token) < 32 || strings.Count(logs.String(), token) != 1 {
		t.Fatalf("token %q printed %d times in %q", token, strings.Count(logs.String(), token), logs.String())
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for tok, want := range map[string]int{token: http.StatusSeeOther, token + "x": http.StatusUnauthorized} {
		resp, err := client.PostForm("http://"+m.OpsAddr+"/login", url.Values{"token": {tok}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("login with %q: %d, want %d", tok, resp.StatusCode, want)
		}
	}
}
