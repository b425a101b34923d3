package webhookd

import (
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxEndpointURLLength is the longest endpoint URL accepted, in characters.
const MaxEndpointURLLength = 2048

// ParseEndpointURL parses an endpoint URL and checks that an HTTP client
// can dial it (SPEC §2): absolute http or https, a host, a port (when
// given) in 1–65535, no whitespace or control characters, no user info, at
// most MaxEndpointURLLength characters. Anything else is a validation_failed
// error naming url. Whether the host may be dialled (loopback, private
// networks) is for the caller and the dial-time guard to say.
func ParseEndpointURL(raw string) (*url.URL, error) {
	switch {
	case !utf8.ValidString(raw):
		return nil, Invalid("url", "must be valid UTF-8")
	case raw == "" || utf8.RuneCountInString(raw) > MaxEndpointURLLength:
		return nil, Invalid("url", "must be an absolute http or https URL of at most %d characters", MaxEndpointURLLength)
	case strings.IndexFunc(raw, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		// url.Parse refuses ASCII controls but takes spaces in the path
		// and C1 controls anywhere.
		return nil, Invalid("url", "must not contain whitespace or control characters")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, Invalid("url", "must be an absolute http or https URL")
	}
	if u.User != nil { // http://@host/ too: an empty user is still user info
		return nil, Invalid("url", "must not carry a user name or password")
	}
	if !dialableHost(u) {
		return nil, Invalid("url", "must name a host (a DNS name or an IP address)")
	}
	if p := u.Port(); p != "" { // "host:" has none: a client dials the scheme's port (RFC 3986 §3.2.3)
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, Invalid("url", "must have a port between 1 and 65535")
		}
	}
	return u, nil
}

// dialableHost reports whether u names a host a client can look up: an IP
// literal in brackets, or a name of letters, digits, marks (international
// names), '-', '_' and '.'. url.Parse lets through an empty host
// (http://:80/, http:///x, http:x) and characters no resolver takes
// (http://a<b/).
func dialableHost(u *url.URL) bool {
	host := u.Hostname()
	if host == "" {
		return false
	}
	if strings.HasPrefix(u.Host, "[") {
		_, err := netip.ParseAddr(host)
		return err == nil
	}
	for _, r := range host {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.IsMark(r) && r != '-' && r != '_' && r != '.' {
			return false
		}
	}
	return true
}
