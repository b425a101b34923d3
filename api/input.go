package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/webhookd/webhookd"
)

// The input rules every route gets without asking (SPEC §2: no client input
// produces a 5xx). handle applies checkRequest to the path values and the
// query; decodeObject applies checkBody and checkJSONText to every body it
// decodes; idempotent applies checkText to the Idempotency-Key; bearerToken
// (auth.go) parses the Authorization header; noRoute answers 404 or 405.
// What passes them is text PostgreSQL stores as sent: valid UTF-8 without
// NUL characters.

// textProblem says what is wrong with s as stored text, or "" when nothing
// is.
func textProblem(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "must not contain NUL characters"
	}
	return ""
}

// checkText refuses a string PostgreSQL cannot store as text: bytes that
// are not UTF-8, or NUL. The error is validation_failed naming field.
func checkText(field, s string) error {
	if p := textProblem(s); p != "" {
		return webhookd.Invalid(field, "%s", p)
	}
	return nil
}

// checkBody refuses a request body that is not UTF-8 (RFC 8259 §8.1) or not
// JSON: invalid_json.
func checkBody(body []byte) error {
	if !utf8.Valid(body) {
		return &webhookd.Error{Code: webhookd.CodeInvalidJSON,
			Message: "request body is not valid UTF-8 (from byte " + strconv.Itoa(invalidUTF8At(body)) + ")"}
	}
	if !json.Valid(body) {
		return &webhookd.Error{Code: webhookd.CodeInvalidJSON, Message: "request body is not valid JSON"}
	}
	return nil
}

// invalidUTF8At is the offset of the first byte of b that is not UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// checkJSONText refuses the string escapes of a valid JSON value (keys
// included) that decode to no text: \u0000, which neither PostgreSQL's
// text nor its jsonb takes, and an unpaired surrogate (\ud800 alone), which
// is no Unicode character. The error is validation_failed naming field.
func checkJSONText(field string, raw []byte) error {
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			if raw[i+1] != 'u' { // \" \\ \/ \b \f \n \r \t
				i++
				continue
			}
			r := hex4(raw[i+2 : i+6])
			i += 5
			switch {
			case r == 0:
				return webhookd.Invalid(field, `must not contain NUL characters (\u0000)`)
			case r >= 0xDC00 && r <= 0xDFFF:
				return webhookd.Invalid(field, `must not contain an unpaired surrogate (\u%04x)`, r)
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
					return webhookd.Invalid(field, `must not contain an unpaired surrogate (\u%04x)`, r)
				}
				if lo := hex4(raw[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
					return webhookd.Invalid(field, `must not contain an unpaired surrogate (\u%04x)`, r)
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 reads the four hex digits of a \u escape (valid JSON has them).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// pathWildcards lists the {name} wildcards of a ServeMux pattern.
func pathWildcards(pattern string) []string {
	var names []string
	for _, seg := range strings.Split(pattern, "/") {
		if name, ok := strings.CutPrefix(seg, "{"); ok {
			names = append(names, strings.TrimSuffix(strings.TrimSuffix(name, "}"), "..."))
		}
	}
	return names
}

// checkRequest applies the text rules to what a route reads besides its
// body. A path value that is no text names nothing (not_found); a query
// string that is not URL encoding, or a parameter that is no text, is
// validation_failed naming the parameter.
func checkRequest(r *http.Request, wildcards []string) error {
	for _, name := range wildcards {
		if textProblem(r.PathValue(name)) != "" {
			return &webhookd.Error{Code: webhookd.CodeNotFound, Message: "no such " + name}
		}
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return webhookd.Invalid("query", "is not valid URL encoding (%s)", strings.ToValidUTF8(err.Error(), "\uFFFD"))
	}
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names) // report the same parameter every time
	for _, name := range names {
		if p := textProblem(name); p != "" {
			return webhookd.Invalid("query", "parameter names %s", p)
		}
		field := name
		if field == "" { // "?=x" names no parameter
			field = "query"
		}
		for _, v := range q[name] {
			if err := checkText(field, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// noRoute answers a request no route matched: 405 method_not_allowed with
// Allow when its path is served under other methods, else 404 not_found.
func (s *Server) noRoute(c *call) (int, any, error) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := c.r.Clone(c.ctx)
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		} else if _, pattern := s.streams.Handler(probe); pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		return 0, nil, &webhookd.Error{Code: webhookd.CodeNotFound, Message: "no such route"}
	}
	c.header.Set("Allow", strings.Join(allow, ", "))
	return 0, nil, &webhookd.Error{Code: webhookd.CodeMethodNotAllowed,
		Message: c.r.Method + " is not allowed here; allowed: " + strings.Join(allow, ", ")}
}
