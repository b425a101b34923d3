package webhookd

import (
	"context"
	"strings"
)

// RelayScheme is the scheme of a relay endpoint's URL, relay://NAME (SPEC §3
// "Relay endpoints"): its deliveries go to whoever runs `webhookd listen`
// for NAME in the endpoint's project, through the API's stream.
const RelayScheme = "relay"

// maxRelayName is the longest relay name accepted.
const maxRelayName = 64

// RelayName returns the name of a relay endpoint's URL (relay://NAME, NAME
// 1–64 characters of A-Z a-z 0-9 _ -) and true, or false for any other URL.
func RelayName(url string) (string, bool) {
	name, ok := strings.CutPrefix(url, RelayScheme+"://")
	if !ok || !ValidRelayName(name) {
		return "", false
	}
	return name, true
}

// ValidRelayName tells whether name can name a relay (RelayName).
func ValidRelayName(name string) bool {
	if name == "" || len(name) > maxRelayName {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// RelayURL is the URL of the relay endpoint named name.
func RelayURL(name string) string { return RelayScheme + "://" + name }

// projectKey carries a project id in a context.
type projectKey struct{}

// WithProject returns ctx carrying project id: a relay request names its
// relay by URL, and a relay is its project's (the dispatcher sets it for
// the transport that carries relay requests).
func WithProject(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, projectKey{}, id)
}

// ProjectOf returns the project id WithProject put in ctx, or "".
func ProjectOf(ctx context.Context) string {
	id, _ := ctx.Value(projectKey{}).(string)
	return id
}
