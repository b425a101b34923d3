package api

import (
	"errors"
	"testing"

	"github.com/webhookd/webhookd"
)

// FuzzParseEvent feeds arbitrary request bodies to the event parser: it
// never panics, and every refusal is a 400 or 413 application error naming
// what is wrong.
func FuzzParseEvent(f *testing.F) {
	for _, seed := range []string{`{"type":"a.b","data":{"x":1}}`, `{"type":"a","data":null,"external_id":"e","endpoint_ids":["ep_1"]}`,
		`{"type":5}`, `[]`, `{"data":`, `{"type":"a","data":1,"x":2}`, `"str"`, `{"type":"a","data":1,"endpoint_ids":[""]}`} {
		f.Add([]byte(seed))
	}
	s := newEventChecker(nil, 1024)
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := s.parseEvent(body, "")
		if err == nil {
			if !eventTypePattern.MatchString(ev.Type) || len(ev.Data) == 0 {
				t.Fatalf("accepted %q as %+v", body, ev)
			}
			return
		}
		var e *webhookd.Error
		if !errors.As(err, &e) {
			t.Fatalf("%q: not an application error: %v", body, err)
		}
		switch e.Code {
		case webhookd.CodeInvalidJSON, webhookd.CodePayloadTooLarge:
		case webhookd.CodeValidationFailed:
			if e.Field == "" {
				t.Fatalf("%q: validation error names no field: %v", body, e)
			}
		default:
			t.Fatalf("%q: unexpected code %s", body, e.Code)
		}
	})
}
