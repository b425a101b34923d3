// Package transform runs an endpoint's transformation (SPEC §3, "Filters
// and transformations"): JavaScript that defines `function
// handler(webhook)`, given `{method, url, headers, payload}` and returning
// it changed — its payload, added headers, the URL's path and query, never
// its host — or with `cancel: true`.
//
// Scripts run in github.com/dop251/goja, sandboxed: the runtime has no
// I/O, timers or modules to begin with, and the allocators a script could
// ask for gigabytes with in one native call (String.prototype.repeat,
// padStart, padEnd, Array.prototype.fill and join, Array.from, typed
// arrays) are capped at the output limit or removed, since goja's
// interrupt stops JavaScript between instructions, never inside a
// built-in. A run is interrupted at its budget (50 ms by default), a call
// depth past maxDepth is a stack overflow, and a body past the output
// limit is refused. Every failure is an *Error whose message says what the
// script did; the caller dead-letters the delivery with it.
package transform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/dlclark/regexp2"
	"github.com/dop251/goja"

	"github.com/webhookd/webhookd"
)

// DefaultBudget is how long one run may take (WEBHOOKD_TRANSFORM_TIMEOUT).
const DefaultBudget = 50 * time.Millisecond

// maxDepth bounds a script's call depth.
const maxDepth = 256

// MaxSource bounds a transformation's source text.
const MaxSource = 64 << 10

// Webhook is the request a transformation is given.
type Webhook struct {
	Method  string
	URL     string
	Headers map[string]string
	Payload json.RawMessage // the body, JSON
}

// WebhookOf is the request ev is sent to an endpoint at url as, before
// the endpoint's transformation: what the transformation is given. Its
// headers are webhookd's own that a script may read and change (the
// signature is made after it, over the body it returns).
func WebhookOf(url string, ev webhookd.Event) (Webhook, error) {
	body, err := ev.Body()
	if err != nil {
		return Webhook{}, err
	}
	return Webhook{Method: "POST", URL: url, Payload: body, Headers: map[string]string{
		"user-agent": webhookd.UserAgent(), "x-event-id": ev.ID, "x-event-type": ev.Type}}, nil
}

// Result is what a transformation made of a Webhook: the request to send,
// or Cancel (no attempt; the delivery ends canceled).
type Result struct {
	Cancel  bool
	URL     string
	Headers map[string]string
	Body    []byte // JSON
}

// Error is a transformation that failed: it did not compile, threw, ran
// past its budget, or returned something that cannot be sent.
type Error struct {
	Message string
}

func (e *Error) Error() string { return "transformation: " + e.Message }

func fail(format string, args ...any) *Error { return &Error{Message: fmt.Sprintf(format, args...)} }

// Config tunes an Engine. The zero value is usable.
type Config struct {
	// Budget is how long one run may take; default DefaultBudget.
	Budget time.Duration
	// MaxOutput bounds the body a run returns, and any one string or
	// array it makes; default 256 KiB. webhookd sets it to its payload
	// limit (WEBHOOKD_MAX_PAYLOAD_BYTES).
	MaxOutput int
	// Programs is how many compiled scripts are kept; default 1,000.
	Programs int
}

// Engine compiles scripts once and runs them on runtimes kept per key
// (an endpoint and its version): a runtime that has loaded a script is
// reused for that key's next run, so a run costs the handler's call, not
// a new runtime. A script's globals may thus outlive a run, but never
// reach another key's. A runtime whose run failed is dropped. It is safe
// for concurrent use.
type Engine struct {
	cfg   Config
	mu    sync.Mutex
	progs map[string]*goja.Program // by source
	pools map[string]*pool         // by key
	order []string                 // keys, oldest first, to evict
}

// pool is the idle runtimes of one key, all loaded with src.
type pool struct {
	src  string
	idle []*loaded
}

// matchTimeout guards regexp2.DefaultMatchTimeout.
var matchTimeout sync.Mutex

// maxIdle bounds the idle runtimes kept per key.
const maxIdle = 4

// loaded is a runtime that ran the guards and a script.
type loaded struct {
	vm        *goja.Runtime
	handler   goja.Callable
	stringify goja.Callable
	budget    *time.Timer
}

// NewEngine returns an Engine.
func NewEngine(cfg Config) *Engine {
	if cfg.Budget <= 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = 256 << 10
	}
	if cfg.Programs <= 0 {
		cfg.Programs = 1000
	}
	// goja matches what RE2 cannot (lookarounds, backreferences) with
	// regexp2, which backtracks inside a built-in that no interrupt stops:
	// a match may take the budget at most (it then fails as no match, and
	// the interrupt ends the script). regexp2's default is process-wide,
	// and forever: it becomes the shortest budget of any engine.
	matchTimeout.Lock()
	regexp2.DefaultMatchTimeout = min(regexp2.DefaultMatchTimeout, cfg.Budget)
	matchTimeout.Unlock()
	return &Engine{cfg: cfg, progs: map[string]*goja.Program{}, pools: map[string]*pool{}}
}

// Check compiles src and tells what is wrong with it: whether it is
// JavaScript and defines a function handler, loaded within the budget. It
// does not run the handler.
func (e *Engine) Check(src string) error {
	_, err := e.load(context.Background(), src)
	return err
}

// Run runs src's handler on w, on a runtime of key's (the caller's name
// for the endpoint and the version of its script).
func (e *Engine) Run(ctx context.Context, key, src string, w Webhook) (Result, error) {
	l, err := e.get(ctx, key, src)
	if err != nil {
		return Result{}, err
	}
	var res Result
	err = e.within(ctx, l.vm, func() error {
		payload, err := parseJSON(l.vm, w.Payload)
		if err != nil {
			return fail("the payload is not JSON")
		}
		hs := l.vm.NewObject()
		for k, v := range w.Headers {
			_ = hs.Set(strings.ToLower(k), v)
		}
		obj := l.vm.NewObject()
		_ = obj.Set("method", w.Method)
		_ = obj.Set("url", w.URL)
		_ = obj.Set("headers", hs)
		_ = obj.Set("payload", payload)
		out, err := l.handler(goja.Undefined(), obj)
		if err != nil {
			return err
		}
		res, err = e.result(l, w, out)
		return err
	})
	if err == nil {
		e.put(key, src, l)
	}
	return res, err
}

// get takes an idle runtime of key's loaded with src, or loads one.
func (e *Engine) get(ctx context.Context, key, src string) (*loaded, error) {
	e.mu.Lock()
	if p := e.pools[key]; p != nil && p.src == src && len(p.idle) > 0 {
		l := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		e.mu.Unlock()
		return l, nil
	}
	e.mu.Unlock()
	return e.load(ctx, src)
}

// put keeps l for key's next run.
func (e *Engine) put(key, src string, l *loaded) {
	l.vm.ClearInterrupt() // a budget that fired as the run ended
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.pools[key]
	if p == nil || p.src != src {
		if p == nil {
			e.order = append(e.order, key)
			if len(e.order) > e.cfg.Programs {
				delete(e.pools, e.order[0])
				e.order = e.order[1:]
			}
		}
		p = &pool{src: src}
		e.pools[key] = p
	}
	if len(p.idle) < maxIdle {
		p.idle = append(p.idle, l)
	}
}

// load makes a runtime and runs the guards and src in it.
func (e *Engine) load(ctx context.Context, src string) (*loaded, error) {
	prog, err := e.program(src)
	if err != nil {
		return nil, err
	}
	vm := goja.New()
	vm.SetMaxCallStackSize(maxDepth)
	l := &loaded{vm: vm}
	err = e.within(ctx, vm, func() error {
		if _, err := vm.RunString(fmt.Sprintf(guards, e.cfg.MaxOutput)); err != nil {
			return err
		}
		if _, err := vm.RunProgram(prog); err != nil {
			return err
		}
		var ok bool
		if l.handler, ok = goja.AssertFunction(vm.Get("handler")); !ok {
			return fail("the script must define function handler(webhook)")
		}
		json := vm.Get("JSON").ToObject(vm)
		l.stringify, _ = goja.AssertFunction(json.Get("stringify"))
		return nil
	})
	if err != nil {
		return nil, err
	}
	vm.ClearInterrupt()
	return l, nil
}

// within runs fn on vm, interrupting it at the budget or when ctx ends,
// and turns what it threw into an *Error.
func (e *Engine) within(ctx context.Context, vm *goja.Runtime, fn func() error) (err error) {
	budget := time.AfterFunc(e.cfg.Budget, func() { vm.Interrupt(errBudget) })
	defer budget.Stop()
	stop := context.AfterFunc(ctx, func() { vm.Interrupt(ctx.Err()) })
	defer stop()
	defer func() {
		// goja reports a Go panic in a built-in as a panic: a script must
		// never crash the worker.
		if p := recover(); p != nil {
			err = fail("the script crashed the engine: %v", p)
		}
	}()
	return explain(fn(), e.cfg.Budget)
}

var errBudget = errors.New("budget")

// explain turns what a run returned into an *Error.
func explain(err error, budget time.Duration) error {
	var (
		te  *Error
		ie  *goja.InterruptedError
		so  *goja.StackOverflowError
		ex  *goja.Exception
		syn *goja.CompilerSyntaxError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		return te
	case errors.As(err, &ie):
		if errors.Is(ie, errBudget) {
			return fail("stopped after %v: its time budget", budget)
		}
		return fail("stopped: %v", ie.Value())
	case errors.As(err, &so):
		return fail("call stack exceeded %d frames (runaway recursion?)", maxDepth)
	case errors.As(err, &ex):
		return fail("threw %s", truncate(shown(ex.Value()), 500))
	case errors.As(err, &syn):
		return fail("syntax error: %s", truncate(syn.Error(), 500))
	}
	return fail("%s", truncate(err.Error(), 500))
}

// shown is a thrown value as text, or a word for one whose toString
// throws in turn.
func shown(v goja.Value) (s string) {
	defer func() {
		if recover() != nil {
			s = "a value that cannot be shown"
		}
	}()
	return v.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// result reads the handler's return value.
func (e *Engine) result(l *loaded, w Webhook, out goja.Value) (Result, error) {
	if out == nil || goja.IsUndefined(out) || goja.IsNull(out) {
		return Result{}, fail("handler returned nothing: return the webhook (changed), or {cancel: true}")
	}
	obj, ok := out.(*goja.Object)
	if !ok || obj.ClassName() != "Object" {
		return Result{}, fail("handler must return an object (the webhook), not %s", out.String())
	}
	if c := obj.Get("cancel"); c != nil && c.ToBoolean() {
		return Result{Cancel: true}, nil
	}
	res := Result{URL: w.URL, Headers: map[string]string{}}
	if u := obj.Get("url"); u != nil && !goja.IsUndefined(u) {
		s, ok := u.Export().(string)
		if !ok {
			return Result{}, fail("url must be a string")
		}
		if err := sameHost(w.URL, s); err != nil {
			return Result{}, err
		}
		res.URL = s
	}
	if h := obj.Get("headers"); h != nil && !goja.IsUndefined(h) && !goja.IsNull(h) {
		ho, ok := h.(*goja.Object)
		if !ok {
			return Result{}, fail("headers must be an object of strings")
		}
		for _, k := range ho.Keys() {
			v, ok := ho.Get(k).Export().(string)
			if !ok {
				return Result{}, fail("header %q must be a string", truncate(k, 100))
			}
			if err := checkHeader(k, v); err != nil {
				return Result{}, err
			}
			res.Headers[strings.ToLower(k)] = v
		}
	}
	body, err := l.stringify(goja.Undefined(), obj.Get("payload"))
	if err != nil {
		return Result{}, err
	}
	if body == nil || goja.IsUndefined(body) {
		return Result{}, fail("payload must be JSON (it was undefined or a function)")
	}
	s := body.String()
	if len(s) > e.cfg.MaxOutput {
		return Result{}, fail("the payload it returned is %d bytes, over the limit of %d", len(s), e.cfg.MaxOutput)
	}
	res.Body = []byte(s)
	return res, nil
}

// sameHost refuses a URL whose scheme, user or host differs from the
// endpoint's: a transformation changes the path and query only. An http or
// https URL must also be one the API would take for an endpoint
// (webhookd.ParseEndpointURL: no whitespace or control characters, at most
// 2048 characters); the address its host resolves to is checked when the
// request dials, as for any delivery.
func sameHost(was, now string) error {
	a, err := url.Parse(was)
	if err != nil {
		return fail("the endpoint's url does not parse")
	}
	b, err := url.Parse(now)
	if err != nil {
		return fail("url %q does not parse", truncate(now, 200))
	}
	if a.Scheme != b.Scheme || a.Host != b.Host || a.User.String() != b.User.String() {
		return fail("url may change only the path and query, not the scheme or host (%q)", truncate(now, 200))
	}
	if b.Scheme == "http" || b.Scheme == "https" {
		if _, err := webhookd.ParseEndpointURL(now); err != nil {
			return fail("%s", err.Error())
		}
	}
	return nil
}

// reserved headers are webhookd's own: the signature and what HTTP sets.
var reserved = map[string]bool{"webhook-id": true, "webhook-timestamp": true, "webhook-signature": true,
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true, "content-type": true}

func checkHeader(k, v string) error {
	lk := strings.ToLower(k)
	if k == "" || len(k) > 256 || strings.ContainsFunc(k, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", r)
	}) {
		return fail("header name %q is not a valid token", truncate(k, 100))
	}
	if reserved[lk] {
		return fail("header %s is set by webhookd", lk)
	}
	if len(v) > 8<<10 || strings.ContainsAny(v, "\r\n\x00") {
		return fail("header %s: a value has no line breaks and at most 8 KiB", lk)
	}
	return nil
}

// program compiles src once.
func (e *Engine) program(src string) (*goja.Program, error) {
	if len(src) > MaxSource {
		return nil, fail("the script is %d bytes, over the limit of %d", len(src), MaxSource)
	}
	e.mu.Lock()
	p, ok := e.progs[src]
	e.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := goja.Compile("transformation.js", src, false)
	if err != nil {
		return nil, explain(err, 0)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.progs) >= e.cfg.Programs {
		clear(e.progs) // rare: more distinct scripts than kept; they compile again
	}
	e.progs[src] = p
	return p, nil
}

// guards caps (%d: the output limit) or removes the built-ins that make a
// large string or array in one native call, which no interrupt stops.
const guards = `(function () {
	var max = %d;
	function big() { throw new RangeError("a string or array over the output limit of " + max + " bytes"); }
	var call = Reflect.apply;
	function wrap(o, name, check) {
		var f = o[name];
		Object.defineProperty(o, name, { value: function () { call(check, this, arguments); return call(f, this, arguments); },
			writable: true, configurable: true });
	}
	wrap(String.prototype, "repeat", function (n) { if (String(this).length * Number(n) > max) big(); });
	wrap(String.prototype, "padStart", function (n) { if (Number(n) > max) big(); });
	wrap(String.prototype, "padEnd", function (n) { if (Number(n) > max) big(); });
	wrap(Array.prototype, "fill", function () { if (this.length > max) big(); });
	wrap(Array.prototype, "join", function () { if (this.length > max) big(); });
	wrap(Array, "from", function (a) { if (a != null && a.length > max) big(); });
	wrap(Function.prototype, "apply", function (t, a) { if (a != null && a.length > max) big(); });
	wrap(Reflect, "apply", function (f, t, a) { if (a != null && a.length > max) big(); });
	["ArrayBuffer", "SharedArrayBuffer", "DataView", "Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array",
	 "Uint16Array", "Int32Array", "Uint32Array", "Float32Array", "Float64Array", "BigInt64Array", "BigUint64Array",
	 "WeakRef", "FinalizationRegistry"].forEach(function (n) { delete globalThis[n]; });
})();`
