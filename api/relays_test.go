package api_test

import (
	"net/http"
	"testing"

	"github.com/webhookd/webhookd/api"
)

// streams records the relay streams the API hands over.
type streams struct{ project, name string }

func (s *streams) Serve(w http.ResponseWriter, _ *http.Request, project, name string) {
	s.project, s.name = project, name
	w.WriteHeader(http.StatusNoContent) // a real hub upgrades to a WebSocket
}

// TestRelayEndpointsAndStreams: relay://NAME is an endpoint URL even where
// private networks are refused (nothing is dialled for it), a malformed one
// is refused naming url; the stream route hands an authenticated project's
// stream to Config.Relay, refuses a missing key and a bad name, and answers
// 404 where no relay is configured.
func TestRelayEndpointsAndStreams(t *testing.T) {
	t.Parallel()
	hub := &streams{}
	h := newHarness(t, func(c *api.Config) { c.AllowPrivateNetworks, c.Relay = false, hub })
	r := h.do(req{method: "POST", path: "/v1/endpoints", idem: "k1", body: map[string]any{"url": "relay://laptop"}})
	expectStatus(t, r, http.StatusCreated)
	if got := r.json(t)["url"]; got != "relay://laptop" {
		t.Fatalf("url %v", got)
	}
	for i, url := range []string{"relay://", "relay://a b", "relay://x/y", "relay://" + string(make([]byte, 65))} {
		r := h.do(req{method: "POST", path: "/v1/endpoints", idem: "bad" + string(rune('a'+i)), body: map[string]any{"url": url}})
		expectStatus(t, r, http.StatusBadRequest)
		if e := r.json(t)["error"].(map[string]any); e["field"] != "url" {
			t.Errorf("%q: %v, want validation_failed naming url", url, e)
		}
	}

	r = h.do(req{method: "GET", path: "/v1/relays/laptop/stream"})
	if r.status != http.StatusNoContent || hub.name != "laptop" || hub.project != h.projectOf(h.key) {
		t.Fatalf("stream: %d, handed %+v", r.status, hub)
	}
	expectStatus(t, h.do(req{method: "GET", path: "/v1/relays/laptop/stream", key: "-"}), http.StatusUnauthorized)
	expectStatus(t, h.do(req{method: "GET", path: "/v1/relays/a%20b/stream"}), http.StatusBadRequest)
	expectStatus(t, h.do(req{method: "POST", path: "/v1/relays/laptop/stream"}), http.StatusMethodNotAllowed)

	none := h.newServer()
	expectStatus(t, h.do(req{method: "GET", path: "/v1/relays/laptop/stream", server: none}), http.StatusNotFound)
}
