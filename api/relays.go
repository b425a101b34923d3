package api

import (
	"net/http"

	"github.com/webhookd/webhookd"
)

// relayStream serves GET /v1/relays/{name}/stream: the stream of `webhookd
// listen` for the project's relay endpoints relay://{name} (SPEC §3
// "Relay endpoints"), a WebSocket held by Config.Relay.
func (s *Server) relayStream(w http.ResponseWriter, r *http.Request, c *call) {
	name := r.PathValue("name")
	switch {
	case s.cfg.Relay == nil:
		s.fail(w, c, &webhookd.Error{Code: webhookd.CodeNotFound, Message: "relay streams are not served here"})
		return
	case !webhookd.ValidRelayName(name):
		s.fail(w, c, webhookd.Invalid("name", "must be 1 to 64 characters of A-Z a-z 0-9 _ -"))
		return
	}
	s.cfg.Relay.Serve(w, r, c.project.ID, name)
}
