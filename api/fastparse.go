package api

import (
	"bytes"
	"encoding/json"

	"github.com/webhookd/webhookd/storage"
)

// The fast path of event parsing. parseEvent checks a body field by field
// with encoding/json: the whole body is read five or six times over, into a
// map and copies, before the event comes out: a large share of the API's
// work with batches. The usual body is plain: known keys,
// once each, strings without escapes. fastEvent and fastBatch read such a
// body once, with no map, and give up on anything else, which then goes
// the slow way (parseEvent, parseEvents) and gets its exact answer or
// error. They accept only what the slow way accepts, with the same result:
// FuzzFastParse holds the two together.

// fastEvent parses body as one event, or reports false: not a plain body,
// or one the slow way would refuse. body must be valid UTF-8.
func (s *Server) fastEvent(body []byte) (storage.NewEvent, bool) {
	r := fastReader{b: body}
	ev, ok := s.fastEventObject(&r)
	r.ws()
	return ev, ok && r.i == len(body)
}

// fastBatch parses body as {"events":[...]}, or reports false as fastEvent
// does (so too for a batch with a repeated external_id, which the slow way
// refuses). body must be valid UTF-8.
func (s *Server) fastBatch(body []byte) ([]storage.NewEvent, bool) {
	r := fastReader{b: body}
	r.ws()
	if !r.take('{') {
		return nil, false
	}
	r.ws()
	if key, ok := r.plainString(); !ok || string(key) != "events" {
		return nil, false
	}
	r.ws()
	if !r.take(':') {
		return nil, false
	}
	r.ws()
	if !r.take('[') {
		return nil, false
	}
	var evs []storage.NewEvent
	for {
		r.ws()
		ev, ok := s.fastEventObject(&r)
		if !ok || len(evs) == MaxBatchEvents {
			return nil, false
		}
		evs = append(evs, ev)
		r.ws()
		if r.take(']') {
			break
		}
		if !r.take(',') {
			return nil, false
		}
	}
	r.ws()
	if !r.take('}') {
		return nil, false
	}
	r.ws()
	if r.i != len(body) {
		return nil, false
	}
	seen := make(map[string]bool)
	for _, ev := range evs {
		if x := ev.ExternalID; x != nil {
			if seen[*x] {
				return nil, false
			}
			seen[*x] = true
		}
	}
	return evs, true
}

// fastEventObject reads one event object at r.
func (s *Server) fastEventObject(r *fastReader) (ev storage.NewEvent, ok bool) {
	if !r.take('{') {
		return ev, false
	}
	var typ, data []byte
	var seenExternal, seenEndpoints bool
	for first := true; ; first = false {
		r.ws()
		if first && r.take('}') {
			break
		}
		key, ok := r.plainString()
		if !ok {
			return ev, false
		}
		r.ws()
		if !r.take(':') {
			return ev, false
		}
		r.ws()
		switch string(key) {
		case "type":
			if typ != nil {
				return ev, false
			}
			if typ, ok = r.plainString(); !ok || !plainEventType(typ) {
				return ev, false
			}
		case "data":
			if data != nil {
				return ev, false
			}
			if data, ok = r.jsonValue(); !ok || int64(len(data)) > s.cfg.MaxPayloadBytes {
				return ev, false
			}
		case "external_id":
			if seenExternal {
				return ev, false
			}
			seenExternal = true
			if !r.null() {
				x, ok := r.plainString()
				if !ok || len(x) == 0 || len(x) > 255 {
					return ev, false
				}
				ext := string(x)
				ev.ExternalID = &ext
			}
		case "endpoint_ids":
			if seenEndpoints {
				return ev, false
			}
			seenEndpoints = true
			if !r.null() {
				if ev.EndpointIDs, ok = r.plainStrings(); !ok {
					return ev, false
				}
			}
		default:
			return ev, false
		}
		r.ws()
		if r.take('}') {
			break
		}
		if !r.take(',') {
			return ev, false
		}
	}
	if typ == nil || data == nil {
		return ev, false
	}
	ev.Type, ev.Data = string(typ), data
	return ev, true
}

// plainEventType is eventTypePattern without the regular expression.
func plainEventType(t []byte) bool {
	if len(t) == 0 || len(t) > 128 {
		return false
	}
	for _, c := range t {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// fastReader reads a JSON text from b at i.
type fastReader struct {
	b []byte
	i int
}

func (r *fastReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// take reads c if it is next.
func (r *fastReader) take(c byte) bool {
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

// null reads the literal null if it is next.
func (r *fastReader) null() bool {
	if bytes.HasPrefix(r.b[r.i:], []byte("null")) {
		r.i += 4
		return true
	}
	return false
}

// plainString reads a string with no escape and no control character and
// returns what is between its quotes.
func (r *fastReader) plainString() ([]byte, bool) {
	if !r.take('"') {
		return nil, false
	}
	start := r.i
	for ; r.i < len(r.b); r.i++ {
		switch c := r.b[r.i]; {
		case c == '"':
			r.i++
			return r.b[start : r.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// plainStrings reads an array of non-empty plain strings.
func (r *fastReader) plainStrings() ([]string, bool) {
	if !r.take('[') {
		return nil, false
	}
	out := []string{}
	r.ws()
	if r.take(']') {
		return out, true
	}
	for {
		r.ws()
		s, ok := r.plainString()
		if !ok || len(s) == 0 {
			return nil, false
		}
		out = append(out, string(s))
		r.ws()
		if r.take(']') {
			return out, true
		}
		if !r.take(',') {
			return nil, false
		}
	}
}

// jsonValue reads one JSON value and returns it compact, as parseEvent
// stores data: valid, with no \u0000 and no unpaired surrogate, and with
// the spaces between its tokens removed.
func (r *fastReader) jsonValue() ([]byte, bool) {
	start, depth := r.i, 0
	var spaced, escaped bool
scan:
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case '"':
			for r.i++; r.i < len(r.b) && r.b[r.i] != '"'; r.i++ {
				if r.b[r.i] == '\\' {
					escaped = true
					r.i++
				}
			}
			if r.i >= len(r.b) {
				return nil, false
			}
			r.i++
			if depth == 0 {
				break scan
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				break scan // the end of what holds a number or literal
			}
			if depth--; depth == 0 {
				r.i++
				break scan
			}
		case ',':
			if depth == 0 {
				break scan
			}
		case ' ', '\t', '\n', '\r':
			if depth == 0 {
				break scan
			}
			spaced = true
		}
		r.i++
	}
	raw := r.b[start:r.i]
	if len(raw) == 0 || !json.Valid(raw) {
		return nil, false
	}
	if escaped && checkJSONText("data", raw) != nil {
		return nil, false
	}
	if spaced {
		return compactJSON(raw), true
	}
	return raw, true
}
