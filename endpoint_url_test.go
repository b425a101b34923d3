package webhookd_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/webhookd/webhookd"
)

// TestParseEndpointURL: SPEC §2, an endpoint URL is an absolute http(s)
// URL an HTTP client can dial; anything else is validation_failed naming
// url. Only URL strings: nothing here is dialled.
func TestParseEndpointURL(t *testing.T) {
	t.Parallel()
	long := "https://example.com/" + strings.Repeat("a", webhookd.MaxEndpointURLLength-len("https://example.com/"))
	for _, c := range []struct {
		url string
		ok  bool
		why string
	}{
		{"https://example.com/hooks", true, ""},
		{"http://example.com:8080/x?a=b#f", true, ""},
		{"HTTPS://Example.COM/", true, "the scheme is case-insensitive"},
		{"http://127.0.0.1:1/", true, "the lowest port"},
		{"http://[::1]:65535/", true, "the highest port, an IPv6 literal"},
		{"http://[fe80::1%25eth0]/", true, "an IPv6 literal with a zone"},
		{"http://example.com:/", true, "an empty port: the scheme's (RFC 3986 §3.2.3)"},
		{"http://bücher.example/", true, "an international name"},
		{"http://my_host.internal./", true, "underscore, trailing dot"},
		{long, true, "2,048 characters"},
		{"https://example.com/" + strings.Repeat("é", webhookd.MaxEndpointURLLength-len("https://example.com/")), true, "2,048 characters, not bytes"},

		{"", false, "empty"},
		{long + "a", false, "2,049 characters"},
		{"example.com/hooks", false, "relative"},
		{"/hooks", false, "relative"},
		{"ftp://example.com/", false, "another scheme"},
		{"javascript:alert(1)", false, "another scheme"},
		{"http:example.com", false, "opaque: no host"},
		{"http://", false, "empty host"},
		{"http:///hooks", false, "empty host"},
		{"http://:80/", false, "a port without a host"},
		{"http://host:0/", false, "port 0"},
		{"http://host:65536/", false, "port above 65535"},
		{"http://host:99999/", false, "port above 65535"},
		{"http://host:99999999999999999999999/", false, "port overflowing an int"},
		{"http://a b/", false, "a space in the host"},
		{"http://host/a b", false, "a space in the path"},
		{"http://host/a\u00a0b", false, "a no-break space"},
		{"http://host/\u2028", false, "a line separator"},
		{"http://host/\x7f", false, "DEL"},
		{"http://host/\u0085", false, "a C1 control"},
		{"http://host/\x00", false, "NUL"},
		{"http://host\t/", false, "a tab"},
		{"http://host/\xff", false, "not UTF-8"},
		{"http://user:pw@host/", false, "user info"},
		{"http://user@host/", false, "a user name"},
		{"http://@host/", false, "empty user info"},
		{"https://[::1/", false, "an unclosed IPv6 literal"},
		{"http://[example.com]/", false, "brackets around a name"},
		{"http://a<b/", false, "a character no resolver takes"},
		{"http://host:80:90/", false, "two ports"},
		{"http://ex%41mple.com/", false, "an escape in the host"},
	} {
		u, err := webhookd.ParseEndpointURL(c.url)
		if c.ok {
			if err != nil || u == nil {
				t.Errorf("%q (%s): %v; want it accepted", c.url, c.why, err)
			}
			continue
		}
		var e *webhookd.Error
		if !errors.As(err, &e) || e.Code != webhookd.CodeValidationFailed || e.Field != "url" || u != nil {
			t.Errorf("%q (%s): %v, %v; want validation_failed naming url", c.url, c.why, u, err)
		}
	}
}
