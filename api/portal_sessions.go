package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/webhookd/webhookd"
)

// Portal link lifetimes (SPEC §5b).
const (
	DefaultPortalLinkTTL = 15 * time.Minute
	MaxPortalLinkTTL     = 24 * time.Hour
)

// PortalLinkPath is the path of a portal link with token: the dashboard
// serves it (dashboard.Server, /portal/open/{token}).
func PortalLinkPath(token string) string { return "/portal/open/" + token }

// createPortalSession serves POST /v1/portal-sessions: {"ttl"?} (a
// duration such as "1h", or seconds) → 201 {"url","expires_at"}, a one-time
// link into the portal for the key's project.
func (s *Server) createPortalSession(c *call) (int, any, error) {
	var ttlRaw json.RawMessage
	if len(strings.TrimSpace(string(c.body))) > 0 {
		if _, err := decodeObject(c.body, "", map[string]any{"ttl": &ttlRaw}); err != nil {
			return 0, nil, err
		}
	}
	ttl, err := parseTTL(ttlRaw)
	if err != nil {
		return 0, nil, err
	}
	now := s.clock.Now()
	expires := now.Add(ttl)
	token, err := c.store.CreatePortalLink(c.ctx, c.project.ID, now, expires)
	if err != nil {
		return 0, nil, err
	}
	c.secret = true // the link's token, stored only hashed, goes in the key's record sealed for this API key
	return http.StatusCreated, map[string]string{
		"url":        strings.TrimSuffix(s.cfg.PortalBaseURL, "/") + PortalLinkPath(token),
		"expires_at": timeString(expires),
	}, nil
}

// parseTTL reads a link's ttl: absent or null is the default; a string is
// a Go duration ("90m", "1h"); a number is seconds. It must be from 1
// minute to 24 hours.
func parseTTL(raw json.RawMessage) (time.Duration, error) {
	if isNull(raw) {
		return DefaultPortalLinkTTL, nil
	}
	bad := webhookd.Invalid("ttl", `must be a duration from 1m to 24h, such as "15m" or "1h", or a number of seconds`)
	var ttl time.Duration
	var text string
	var secs float64
	switch {
	case json.Unmarshal(raw, &text) == nil:
		d, err := time.ParseDuration(text)
		if err != nil {
			return 0, bad
		}
		ttl = d
	case json.Unmarshal(raw, &secs) == nil:
		if secs < 60 || secs > MaxPortalLinkTTL.Seconds() {
			return 0, bad
		}
		ttl = time.Duration(secs * float64(time.Second))
	default:
		return 0, bad
	}
	if ttl < time.Minute || ttl > MaxPortalLinkTTL {
		return 0, bad
	}
	return ttl, nil
}
