package storage

import (
	"slices"
	"unicode/utf8"
)

// appendHeadersJSON appends h to b as a JSON object with its keys in
// order, as encoding/json would write it (invalid UTF-8 becomes U+FFFD;
// no HTML escaping, which jsonb does not keep anyway). Every attempt
// records two such maps: encoding/json's reflection and key sorting for
// them cost more than the rest of the attempt's record.
func appendHeadersJSON(b []byte, h map[string]string) []byte {
	keys, n := make([]string, 0, len(h)), 2
	for k, v := range h {
		keys = append(keys, k)
		n += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	b = slices.Grow(b, n)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, h[k])
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' { // as encoding/json: JSON allows them, JavaScript did not
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
