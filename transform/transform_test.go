package transform_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd/transform"
)

var hook = transform.Webhook{Method: "POST", URL: "https://hooks.example.com/in?x=1",
	Headers: map[string]string{"User-Agent": "webhookd"}, Payload: json.RawMessage(`{"type":"order.created","data":{"id":"o_1","total":12.5,"customer":{"name":"Zoë"}}}`)}

func TestRun(t *testing.T) {
	e := transform.NewEngine(transform.Config{Budget: 10 * time.Second})
	tests := []struct {
		name, src string
		want      transform.Result
	}{
		{"unchanged", `function handler(w) { return w }`,
			transform.Result{URL: hook.URL, Headers: map[string]string{"user-agent": "webhookd"},
				Body: []byte(`{"type":"order.created","data":{"id":"o_1","total":12.5,"customer":{"name":"Zoë"}}}`)}},
		{"slack", `function handler(w) {
				w.payload = {text: "Order " + w.payload.data.id + " for " + w.payload.data.customer.name + ": " + w.payload.data.total};
				return w }`,
			transform.Result{URL: hook.URL, Headers: map[string]string{"user-agent": "webhookd"}, Body: []byte(`{"text":"Order o_1 for Zoë: 12.5"}`)}},
		{"renamed fields, a header, a path", `function handler(w) {
				var d = w.payload.data;
				w.payload = {orderRef: d.id, amountCents: Math.round(d.total * 100)};
				w.headers["X-Partner-Key"] = "k1";
				w.url = "https://hooks.example.com/v2/orders?src=webhookd";
				return w }`,
			transform.Result{URL: "https://hooks.example.com/v2/orders?src=webhookd",
				Headers: map[string]string{"user-agent": "webhookd", "x-partner-key": "k1"}, Body: []byte(`{"orderRef":"o_1","amountCents":1250}`)}},
		{"cancel", `function handler(w) { if (w.payload.data.total < 100) { w.cancel = true } return w }`,
			transform.Result{Cancel: true}},
	}
	for _, tt := range tests {
		got, err := e.Run(context.Background(), tt.name, tt.src, hook)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got.Cancel != tt.want.Cancel || got.URL != tt.want.URL || string(got.Body) != string(tt.want.Body) ||
			len(got.Headers) != len(tt.want.Headers) {
			t.Errorf("%s: %+v (body %s), want %+v (body %s)", tt.name, got, got.Body, tt.want, tt.want.Body)
		}
		for k, v := range tt.want.Headers {
			if got.Headers[k] != v {
				t.Errorf("%s: header %s %q, want %q", tt.name, k, got.Headers[k], v)
			}
		}
	}
}

// TestHostile: what an integrator may type ends as its own clear error,
// within the budget, without a crash or a runaway allocation.
func TestHostile(t *testing.T) {
	// The runaways get the default budget; the rest a roomy one, so that
	// a loaded machine (-race) does not make them run out of it instead.
	const budget = 50 * time.Millisecond
	quick, roomy := transform.NewEngine(transform.Config{Budget: budget}), transform.NewEngine(transform.Config{Budget: 10 * time.Second})
	tests := []struct{ name, src, says string }{
		{"syntax", `function handler(w) { return w `, "syntax error"},
		{"no handler", `var x = 1`, "must define function handler"},
		{"handler not a function", `var handler = 5`, "must define function handler"},
		{"infinite loop", `function handler(w) { for (;;) {} }`, "time budget"},
		{"infinite loop at load", `while (true) {}`, "time budget"},
		{"deep recursion", `function f(n) { return f(n + 1) + 1 } function handler(w) { return f(0) }`, "call stack"},
		{"throws an Error", `function handler(w) { throw new Error("no such field") }`, "no such field"},
		{"throws a string", `function handler(w) { throw "plain" }`, "threw plain"},
		{"throws undefined", `function handler(w) { throw undefined }`, "threw undefined"},
		{"throws an object", `function handler(w) { throw {toString: function () { throw 1 }} }`, "threw"},
		{"returns nothing", `function handler(w) { }`, "returned nothing"},
		{"returns a number", `function handler(w) { return 42 }`, "must return an object"},
		{"returns an array", `function handler(w) { return [w] }`, "must return an object"},
		{"payload a function", `function handler(w) { w.payload = function () {}; return w }`, "payload must be JSON"},
		{"payload cyclic", `function handler(w) { w.payload = {}; w.payload.self = w.payload; return w }`, "threw"},
		{"payload BigInt", `function handler(w) { w.payload = {n: 10n}; return w }`, "threw"},
		{"another host", `function handler(w) { w.url = "https://evil.example.net/in"; return w }`, "not the scheme or host"},
		{"another scheme", `function handler(w) { w.url = "http://hooks.example.com/in"; return w }`, "not the scheme or host"},
		{"url garbage", `function handler(w) { w.url = 7; return w }`, "url must be a string"},
		{"signature header", `function handler(w) { w.headers["Webhook-Signature"] = "v1,x"; return w }`, "set by webhookd"},
		{"header injection", `function handler(w) { w.headers["X-A"] = "a\r\nX-B: b"; return w }`, "no line breaks"},
		{"header not a string", `function handler(w) { w.headers["X-A"] = 1; return w }`, "must be a string"},
		{"huge repeat", `function handler(w) { w.payload = "x".repeat(1e9); return w }`, "over the output limit"},
		{"huge padEnd", `function handler(w) { w.payload = "".padEnd(2e9); return w }`, "over the output limit"},
		{"huge fill", `function handler(w) { w.payload = new Array(1e9).fill(1); return w }`, "over the output limit"},
		{"huge join", `function handler(w) { w.payload = new Array(1e9).join("x"); return w }`, "over the output limit"},
		{"huge Array.from", `function handler(w) { w.payload = Array.from({length: 1e9}); return w }`, "over the output limit"},
		{"huge apply", `function handler(w) { return Math.max.apply(null, new Array(1e8)) }`, "over the output limit"},
		{"doubling", `function handler(w) { var s = "x"; for (;;) { s = s + s } }`, "time budget"},
		{"array growth", `function handler(w) { var a = []; for (;;) { a.push(a.length) } }`, "time budget"},
		{"typed arrays gone", `function handler(w) { w.payload = new Uint8Array(1e9); return w }`, "threw"},
		{"big output", `function handler(w) { var s = "x".repeat(200000); w.payload = [s, s]; return w }`, "over the limit"},
		{"require", `function handler(w) { require("fs"); return w }`, "threw"},
		{"timers", `function handler(w) { setTimeout(function () {}, 1); return w }`, "threw"},
		{"regex bomb (backtracking)", `function handler(w) { /^(a+)+(?=b)/.test("a".repeat(40) + "!"); return w }`, "time budget"},
	}
	for _, tt := range tests {
		e := roomy
		if tt.says == "time budget" {
			e = quick
		}
		start := time.Now()
		_, err := e.Run(context.Background(), tt.name, tt.src, hook)
		took := time.Since(start)
		var te *transform.Error
		if !errors.As(err, &te) || !strings.Contains(te.Message, tt.says) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.says)
		}
		if e == quick && took > budget+time.Second { // the budget, and room for a loaded machine
			t.Errorf("%s: took %v", tt.name, took)
		}
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if m.HeapAlloc > 1<<30 {
		t.Errorf("heap %d MiB after the hostile scripts", m.HeapAlloc>>20)
	}
}

// TestRunawayLeavesOthersAlone: a script stuck in a loop uses its own
// goroutine's budget; other transformations meanwhile take their usual
// time.
func TestRunawayLeavesOthersAlone(t *testing.T) {
	e := transform.NewEngine(transform.Config{Budget: 50 * time.Millisecond})
	others := transform.NewEngine(transform.Config{Budget: 10 * time.Second})
	var wg sync.WaitGroup
	wg.Go(func() { e.Run(context.Background(), "runaway", `function handler(w) { for (;;) {} }`, hook) })
	for range 20 {
		if _, err := others.Run(context.Background(), "other", `function handler(w) { w.payload = {ok: true}; return w }`, hook); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// TestKeysDoNotShare: a script's globals may outlive a run of its key,
// never reach another key's runs, even with the same source.
func TestKeysDoNotShare(t *testing.T) {
	e := transform.NewEngine(transform.Config{Budget: 10 * time.Second})
	src := `var n = 0; function handler(w) { n++; w.payload = {n: n}; return w }`
	for i, key := range []string{"a", "a", "b"} {
		res, err := e.Run(context.Background(), key, src, hook)
		if err != nil {
			t.Fatal(err)
		}
		want := map[int]string{0: `{"n":1}`, 1: `{"n":2}`, 2: `{"n":1}`}[i]
		if string(res.Body) != want {
			t.Errorf("run %d of key %s: %s, want %s", i, key, res.Body, want)
		}
	}
}

func TestCheck(t *testing.T) {
	e := transform.NewEngine(transform.Config{})
	if err := e.Check(`function handler(w) { return w }`); err != nil {
		t.Fatal(err)
	}
	if err := e.Check(`function handle(w) { return w }`); err == nil {
		t.Fatal("a script without handler passed the check")
	}
	if err := e.Check(strings.Repeat(" ", transform.MaxSource+1)); err == nil {
		t.Fatal("an oversized script passed the check")
	}
}

// BenchmarkRun: a transformation of a 4 KiB payload (SPEC's figures: p50
// under 200 µs, p99 under 1 ms).
func BenchmarkRun(b *testing.B) {
	e := transform.NewEngine(transform.Config{Budget: 10 * time.Second})
	var items []map[string]any
	for i := 0; len(items) < 85; i++ { // a 4 KiB payload
		items = append(items, map[string]any{"sku": "SKU-" + strings.Repeat("x", 10), "qty": i, "price": 9.99})
	}
	payload, _ := json.Marshal(map[string]any{"type": "order.created", "data": map[string]any{"id": "o_1", "items": items}})
	w := hook
	w.Payload = payload
	src := `function handler(w) {
		var d = w.payload.data;
		w.payload = {orderRef: d.id, lines: d.items.map(function (i) { return {code: i.sku, n: i.qty} })};
		w.headers["X-Partner"] = "p";
		return w }`
	if _, err := e.Run(context.Background(), "ep_1:1", src, w); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := e.Run(context.Background(), "ep_1:1", src, w); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50_us")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99_us")
}
