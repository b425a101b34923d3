package transform_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd/transform"
)

// FuzzTransform: whatever script and payload an integrator gives, a run
// ends within its budget (and some slack) with a Result that can be sent —
// a JSON body within the output limit, a URL on the endpoint's host,
// headers webhookd does not set itself — or a cancel, or an
// *transform.Error; never a panic or another kind of error.
func FuzzTransform(f *testing.F) {
	f.Add(`function handler(w) { return w }`, `{"id":"evt_1","data":{"a":1}}`)
	f.Add(`function handler(w) { w.payload = {text: w.payload.data.a}; return w }`, `{"data":{"a":"x"}}`)
	f.Add(`function handler(w) { w.headers["X-K"] = "v"; w.url = w.url + "/more?q=1"; return w }`, `{}`)
	f.Add(`function handler(w) { if (w.payload.n > 1) { w.cancel = true } return w }`, `{"n":2}`)
	f.Add(`function handler(w) { w.url = "https://other.example.com/"; return w }`, `[]`)
	f.Add(`function handler(w) { throw {toString: function () { throw 1 }} }`, `null`)
	f.Add(`function handler(w) { return JSON.parse("{") }`, `1`)
	f.Add(`function handler(w) { w.payload = "x".repeat(1e9); return w }`, `"s"`)
	f.Add(`function handler(w) { for (;;) {} }`, `{}`)
	const budget = 20 * time.Millisecond
	e := transform.NewEngine(transform.Config{Budget: budget, MaxOutput: 64 << 10})
	const endpoint = "https://hooks.example.com/in"
	f.Fuzz(func(t *testing.T, src, payload string) {
		w := transform.Webhook{Method: "POST", URL: endpoint, Headers: map[string]string{"user-agent": "webhookd"},
			Payload: json.RawMessage(payload)}
		start := time.Now()
		res, err := e.Run(context.Background(), "fuzz", src, w)
		// Loading the script and running its handler have a budget each.
		if took := time.Since(start); took > 2*budget+2*time.Second {
			t.Fatalf("took %v, budget %v", took, budget)
		}
		var te *transform.Error
		switch {
		case err != nil && !errors.As(err, &te):
			t.Fatalf("error %T %v, want *transform.Error", err, err)
		case err != nil || res.Cancel:
			return
		case !json.Valid(res.Body) || len(res.Body) > 64<<10:
			t.Fatalf("body %q: not JSON within the limit", res.Body)
		}
		u, perr := url.Parse(res.URL)
		if perr != nil || u.Scheme != "https" || u.Host != "hooks.example.com" {
			t.Fatalf("url %q left the endpoint's host", res.URL)
		}
		for k := range res.Headers {
			if k != strings.ToLower(k) || strings.HasPrefix(k, "webhook-") || k == "content-type" || k == "host" {
				t.Fatalf("header %q", k)
			}
		}
	})
}
