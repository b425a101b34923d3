package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/webhookd/webhookd/api"
)

// revoke marks the harness's key revoked in PostgreSQL, as `webhookd keys
// revoke` does.
func (h *harness) revoke(key string) {
	h.t.Helper()
	if _, err := h.db.Pool().Exec(context.Background(),
		`UPDATE api_keys SET revoked_at = now() WHERE prefix = $1`, key[:8]); err != nil {
		h.t.Fatal(err)
	}
}

// untilStatus repeats a request until it answers want, failing after limit;
// each turn first runs between.
func (h *harness) untilStatus(r req, want int, limit time.Duration, between func()) {
	h.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		between()
		got := h.do(r)
		if got.status == want {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s %s still answers %d after %s, want %d", r.method, r.path, got.status, limit, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func withServer(r req, srv *httptest.Server) req {
	r.server = srv
	return r
}

// TestRevokedKeyStopsAtOnceWhenAnnounced: keys are served from a cache, yet
// a revocation announced through Redis applies on every process at once
// (SPEC §7), long before the cache would forget the key.
func TestRevokedKeyStopsAtOnceWhenAnnounced(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.KeyCacheTTL = time.Hour })
	other := h.newServer(func(c *api.Config) { c.KeyCacheTTL = time.Hour })
	list := req{method: "GET", path: "/v1/endpoints", key: h.key}
	for _, srv := range []*httptest.Server{h.srv, other} {
		if r := h.do(withServer(list, srv)); r.status != http.StatusOK {
			t.Fatalf("before revocation: %d", r.status)
		}
	}
	h.revoke(h.key)
	if r := h.do(list); r.status != http.StatusOK {
		t.Fatalf("a cached key answered %d before the announcement; the cache is not used", r.status)
	}
	announce := func() {
		if err := api.PublishKeyRevoked(context.Background(), h.redis, h.key[:8]); err != nil {
			t.Fatal(err)
		}
	}
	for _, srv := range []*httptest.Server{h.srv, other} {
		h.untilStatus(withServer(list, srv), http.StatusUnauthorized, 5*time.Second, announce)
	}
}

// TestRevokedKeyStopsWithinTheCacheTTL: with the announcement lost, a
// revoked key still stops working once its cache entry expires.
func TestRevokedKeyStopsWithinTheCacheTTL(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.KeyCacheTTL = 200 * time.Millisecond })
	list := req{method: "GET", path: "/v1/endpoints", key: h.key}
	if r := h.do(list); r.status != http.StatusOK {
		t.Fatalf("before revocation: %d", r.status)
	}
	h.revoke(h.key)
	start := time.Now()
	h.untilStatus(list, http.StatusUnauthorized, 5*time.Second, func() {})
	t.Logf("revoked key refused %s after revocation", time.Since(start).Round(time.Millisecond))
}

// TestBadKeysAreLimitedPerClientAddress: requests without a good key are
// limited by client address before PostgreSQL is asked, and that address
// is taken from X-Forwarded-For only when the peer is a trusted proxy.
func TestBadKeysAreLimitedPerClientAddress(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) {
		c.UnauthenticatedRateLimit = 2
		c.KeyCacheTTL = time.Hour // the good key stays cached however slow the machine
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	})
	// The good key is known to the key cache before the flood.
	good := req{method: "GET", path: "/v1/endpoints", header: map[string]string{"X-Forwarded-For": "192.0.2.7"}}
	if r := h.do(good); r.status != http.StatusOK {
		t.Fatalf("good key: %d", r.status)
	}
	bad := func(forwarded string) int {
		return h.do(req{method: "GET", path: "/v1/endpoints", key: "whk_not_a_key",
			header: map[string]string{"X-Forwarded-For": forwarded}}).status
	}
	for i, want := range []int{401, 429} {
		if got := bad("192.0.2.7, 127.0.0.1"); got != want {
			t.Fatalf("request %d from 192.0.2.7: %d, want %d", i+1, got, want)
		}
	}
	if got := bad("192.0.2.8"); got != http.StatusUnauthorized {
		t.Fatalf("another client behind the proxy: %d, want 401 (its own budget)", got)
	}
	if r := h.do(good); r.status != http.StatusOK {
		t.Fatalf("a cached good key from the limited address: %d, want 200 (it counts against its project)", r.status)
	}

	direct := newHarness(t, func(c *api.Config) { c.UnauthenticatedRateLimit = 2 })
	for i, forwarded := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		r := direct.do(req{method: "GET", path: "/v1/endpoints", key: "whk_not_a_key",
			header: map[string]string{"X-Forwarded-For": forwarded}})
		if want := []int{401, 401, 429}[i]; r.status != want {
			t.Fatalf("untrusted peer, request %d: %d, want %d (X-Forwarded-For must be ignored)", i+1, r.status, want)
		}
	}
}
