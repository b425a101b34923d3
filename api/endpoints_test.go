package api_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd/api"
)

func TestEndpointLifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ep := h.createEndpoint(map[string]any{"url": "https://hooks.example.com/in", "description": "orders",
		"event_types": []string{"order.created"}, "rate_limit_per_second": 5, "max_in_flight": 25})
	id := ep["id"].(string)
	if !strings.HasPrefix(id, "ep_") || !strings.HasPrefix(ep["secret"].(string), "whsec_") || ep["version"] != 1.0 ||
		ep["status"] != "active" || ep["disabled_reason"] != nil || ep["rate_limit_per_second"] != 5.0 ||
		ep["max_in_flight"] != 25.0 || ep["ordering"] != "none" {
		t.Fatalf("created %v", ep)
	}

	g := h.do(req{method: "GET", path: "/v1/endpoints/" + id})
	expectStatus(t, g, http.StatusOK)
	if _, leaked := g.json(t)["secret"]; leaked {
		t.Fatal("GET endpoint shows the secret")
	}
	if g.header.Get("ETag") != `"1"` {
		t.Fatalf("ETag %q", g.header.Get("ETag"))
	}

	// PATCH with a stale version is refused, quoted or bare; the current one passes.
	for _, m := range []string{`"7"`, "7"} {
		r := h.do(req{method: "PATCH", path: "/v1/endpoints/" + id, body: `{"description":"x"}`, header: map[string]string{"If-Match": m}})
		expectStatus(t, r, http.StatusPreconditionFailed)
		if r.errorCode(t) != "version_mismatch" {
			t.Fatalf("code %s", r.body)
		}
	}
	r := h.do(req{method: "PATCH", path: "/v1/endpoints/" + id, body: `{"description":"new","status":"disabled","rate_limit_per_second":null,"max_in_flight":null}`,
		header: map[string]string{"If-Match": `"1"`}})
	expectStatus(t, r, http.StatusOK)
	p := r.json(t)
	if p["version"] != 2.0 || p["description"] != "new" || p["status"] != "disabled" || p["disabled_reason"] != "manual" || p["rate_limit_per_second"] != nil ||
		p["max_in_flight"] != 1000.0 {
		t.Fatalf("patched %s", r.body)
	}
	r = h.do(req{method: "PATCH", path: "/v1/endpoints/" + id, body: `{"status":"active"}`, header: map[string]string{"If-Match": "2"}})
	expectStatus(t, r, http.StatusOK)
	if r.json(t)["disabled_reason"] != nil || r.json(t)["version"] != 3.0 {
		t.Fatalf("re-enabled %s", r.body)
	}
	r = h.do(req{method: "PATCH", path: "/v1/endpoints/" + id, body: `{"ordering":"fifo"}`})
	expectStatus(t, r, http.StatusOK)
	if r.json(t)["ordering"] != "fifo" {
		t.Fatalf("ordering fifo %s", r.body)
	}
	r = h.do(req{method: "PATCH", path: "/v1/endpoints/" + id, body: `{"ordering":"lifo"}`})
	expectStatus(t, r, http.StatusBadRequest)
	if f := r.json(t)["error"].(map[string]any)["field"]; f != "ordering" {
		t.Fatalf("ordering lifo: field %v", f)
	}
	r = h.do(req{method: "PATCH", path: "/v1/endpoints/" + id, body: `{"ordering":"none"}`})
	expectStatus(t, r, http.StatusOK)
	if r.json(t)["ordering"] != "none" || r.json(t)["version"] != 5.0 {
		t.Fatalf("ordering none %s", r.body)
	}
	// null event_types means every type, read back as the empty list.
	r = h.do(req{method: "PATCH", path: "/v1/endpoints/" + id, body: `{"event_types":null}`})
	expectStatus(t, r, http.StatusOK)
	if et, ok := r.json(t)["event_types"].([]any); !ok || len(et) != 0 || r.json(t)["version"] != 6.0 {
		t.Fatalf("event_types null %s", r.body)
	}
	r = h.do(req{method: "PATCH", path: "/v1/endpoints/" + id, body: `{"status":"paused"}`})
	expectStatus(t, r, http.StatusBadRequest)
	r = h.do(req{method: "PATCH", path: "/v1/endpoints/" + id, body: `{"secret":"whsec_x"}`})
	expectStatus(t, r, http.StatusBadRequest)

	// Secret and rotation: the old secret keeps signing for 24 h.
	s := h.do(req{method: "GET", path: "/v1/endpoints/" + id + "/secret"})
	expectStatus(t, s, http.StatusOK)
	if s.json(t)["secret"] != ep["secret"] || s.json(t)["previous_secret"] != nil || s.json(t)["previous_expires_at"] != nil {
		t.Fatalf("secret %s", s.body)
	}
	rot := h.do(req{method: "POST", path: "/v1/endpoints/" + id + "/rotate-secret", idem: "rot"})
	expectStatus(t, rot, http.StatusOK)
	rj := rot.json(t)
	if rj["previous_secret"] != ep["secret"] || rj["secret"] == ep["secret"] {
		t.Fatalf("rotated %s", rot.body)
	}
	exp, err := time.Parse(time.RFC3339, rj["previous_expires_at"].(string))
	if d := exp.Sub(h.clock.Now()) - 24*time.Hour; err != nil || d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("previous_expires_at %v (%v)", rj["previous_expires_at"], err)
	}
	h.clock.Advance(25 * time.Hour)
	s = h.do(req{method: "GET", path: "/v1/endpoints/" + id + "/secret"})
	if s.json(t)["previous_secret"] != nil || s.json(t)["secret"] != rj["secret"] {
		t.Fatalf("after 25h %s", s.body)
	}

	// Delete: gone from the API.
	d := h.do(req{method: "DELETE", path: "/v1/endpoints/" + id})
	expectStatus(t, d, http.StatusNoContent)
	expectStatus(t, h.do(req{method: "GET", path: "/v1/endpoints/" + id}), http.StatusNotFound)
	expectStatus(t, h.do(req{method: "DELETE", path: "/v1/endpoints/" + id}), http.StatusNotFound)
}

func TestEndpointListPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, h.createEndpoint(map[string]any{"url": fmt.Sprintf("https://example.com/%d", i)})["id"].(string))
	}
	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		path := "/v1/endpoints?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := h.do(req{method: "GET", path: path})
		expectStatus(t, r, http.StatusOK)
		body := r.json(t)
		for _, e := range body["data"].([]any) {
			if _, leaked := e.(map[string]any)["secret"]; leaked {
				t.Fatal("list shows a secret")
			}
			seen = append(seen, e.(map[string]any)["id"].(string))
		}
		next, ok := body["next_cursor"]
		if !ok {
			t.Fatal("next_cursor omitted")
		}
		if next == nil {
			break
		}
		cursor = next.(string)
		if page > 5 {
			t.Fatal("pagination does not end")
		}
	}
	if len(seen) != 5 {
		t.Fatalf("saw %d endpoints", len(seen))
	}
	for i := range seen { // newest first
		if seen[i] != ids[len(ids)-1-i] {
			t.Fatalf("order %v, want reverse of %v", seen, ids)
		}
	}
	for _, bad := range []string{"limit=0", "limit=101", "limit=x", "cursor=!!!"} {
		r := h.do(req{method: "GET", path: "/v1/endpoints?" + bad})
		expectStatus(t, r, http.StatusBadRequest)
	}
}

func TestEndpointURLRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.AllowPrivateNetworks = false })
	bad := []string{"", "ftp://example.com/x", "/relative", "https://", "http://user:pw@example.com/",
		"http://127.0.0.1:8080/x", "http://[::1]/x", "http://localhost/x", "http://10.0.0.1/x",
		"http://169.254.169.254/latest", "http://192.168.1.1/", "https://" + strings.Repeat("a", 2050) + ".com/"}
	for i, u := range bad {
		r := h.do(req{method: "POST", path: "/v1/endpoints", body: map[string]any{"url": u}, idem: fmt.Sprint("u", i)})
		expectStatus(t, r, http.StatusBadRequest)
		if f := r.json(t)["error"].(map[string]any)["field"]; f != "url" {
			t.Errorf("%q: field %v", u, f)
		}
	}
	for i, body := range []string{`{"url":"https://example.com","event_types":["bad type"]}`,
		`{"url":"https://example.com","rate_limit_per_second":0}`, `{"url":"https://example.com","status":"active"}`,
		`{"url":"https://example.com","max_in_flight":0}`, `{"url":"https://example.com","max_in_flight":1001}`,
		`{"url":"https://example.com","ordering":"lifo"}`, `{"url":"https://example.com","ordering":null}`} {
		expectStatus(t, h.do(req{method: "POST", path: "/v1/endpoints", body: body, idem: fmt.Sprint("b", i)}), http.StatusBadRequest)
	}
	if n := h.count("endpoints"); n != 0 {
		t.Fatalf("%d endpoints created by bad requests", n)
	}
	expectStatus(t, h.do(req{method: "POST", path: "/v1/endpoints", body: `{"url":"https://example.com/ok"}`, idem: "ok"}), http.StatusCreated)
}

// TestEndpointURLMustBeDialable: SPEC §2, a URL no HTTP client could dial
// (no host, a port outside 1–65535, whitespace or a control character,
// user info) is refused with 400 validation_failed naming url, by POST and
// by PATCH, and changes nothing. Private networks are allowed here: only
// the URL's form is at stake.
func TestEndpointURLMustBeDialable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	bad := []string{"http://:80/", "http://host:0/", "http://host:99999/", "http://host:65536/", "http://a b/",
		"http://host/a b", "http://user:pw@host/", "http://@host/", "http://host/\x7f", "http://host/\u0085",
		"http:///x", "http:host", "https://[::1/", "http://a<b/", "http://host/" + strings.Repeat("a", 2048)}
	refused := func(what string, r response) {
		t.Helper()
		if r.status != http.StatusBadRequest || r.errorCode(t) != "validation_failed" {
			t.Errorf("%s: %d %s; want 400 validation_failed", what, r.status, r.body)
			return
		}
		if f := r.json(t)["error"].(map[string]any)["field"]; f != "url" {
			t.Errorf("%s: field %v; want url", what, f)
		}
	}
	for i, u := range bad {
		refused("POST "+strconv.Quote(u), h.do(req{method: "POST", path: "/v1/endpoints", body: map[string]any{"url": u}, idem: fmt.Sprint("u", i)}))
	}
	if n := h.count("endpoints"); n != 0 {
		t.Fatalf("%d endpoints created by refused requests", n)
	}

	ep := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	path := "/v1/endpoints/" + ep["id"].(string)
	for _, u := range bad {
		refused("PATCH "+strconv.Quote(u), h.do(req{method: "PATCH", path: path, body: map[string]any{"url": u, "description": "changed"}}))
	}
	g := h.do(req{method: "GET", path: path})
	expectStatus(t, g, http.StatusOK)
	if got := g.json(t); got["url"] != ep["url"] || got["description"] != ep["description"] || got["version"] != ep["version"] {
		t.Fatalf("after refused PATCHes: %v; want it as created: %v", got, ep)
	}
}

// TestEndpointURLSchemeIsCaseInsensitive: HTTP://… is http://… (RFC 3986
// §3.1); it is stored with its scheme in lower case and the rest as sent
// (a fuzz finding: it used to pass validation and fail PostgreSQL's check).
func TestEndpointURLSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, c := range []struct{ in, want string }{
		{"HTTP://127.0.0.1:9/Hook", "http://127.0.0.1:9/Hook"},
		{"hTtPs://127.0.0.1:9/x?A=B", "https://127.0.0.1:9/x?A=B"},
	} {
		r := h.do(req{method: "POST", path: "/v1/endpoints", body: map[string]any{"url": c.in}, idem: c.in})
		expectStatus(t, r, http.StatusCreated)
		if got := r.json(t)["url"]; got != c.want {
			t.Errorf("%s stored as %v, want %s", c.in, got, c.want)
		}
	}
}
