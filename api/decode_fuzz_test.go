package api

import (
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// FuzzParseEvent feeds arbitrary request bodies to the event parser: it
// never panics, and every refusal is a 400 or 413 application error naming
// what is wrong.
func FuzzParseEvent(f *testing.F) {
	for _, seed := range []string{`{"type":"a.b","data":{"x":1}}`, `{"type":"a","data":null,"external_id":"e","endpoint_ids":["ep_1"]}`,
		`{"type":5}`, `[]`, `{"data":`, `{"type":"a","data":1,"x":2}`, `"str"`, `{"type":"a","data":1,"endpoint_ids":[""]}`} {
		f.Add([]byte(seed))
	}
	s := &Server{cfg: Config{MaxPayloadBytes: 1024}}
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

// FuzzFastParse holds the fast path of event parsing (fastparse.go) to the
// slow one: whatever the fast path accepts, the slow path accepts too, with
// the same event or events; and the plain bodies of the seeds take the
// fast path.
func FuzzFastParse(f *testing.F) {
	for _, seed := range fastParseSeeds {
		f.Add([]byte(seed), false)
		f.Add([]byte(`{"events":[`+seed+`]}`), true)
	}
	f.Add([]byte(`{"events":[{"type":"a","data":1,"external_id":"x"},{"type":"b","data":2,"external_id":"x"}]}`), true)
	f.Add([]byte(` { "events" : [ {"type":"a","data":[1, 2]} , {"data":{"k": "v"},"type":"b"} ] } `), true)
	s := &Server{cfg: Config{MaxPayloadBytes: 1024}}
	f.Fuzz(func(t *testing.T, body []byte, batch bool) {
		checkFastParse(t, s, body, batch)
	})
}

// fastParseSeeds are event bodies, plain (the fast path's) and not.
var fastParseSeeds = []string{
	`{"type":"a.b","data":{"x":1}}`,
	`{"type":"a","data":null,"external_id":"e","endpoint_ids":["ep_1"]}`,
	` {"data" : [1, {"a" : "b c"}, "\u00e9\n"] , "type":"t:1-2_3", "external_id":null, "endpoint_ids":null } `,
	`{"type":"a","data":"x","endpoint_ids":[]}`,
	`{"type":"a","data":1e3}`, `{"type":"a","data":true}`, `{"type":"a","data":"\u0000"}`, `{"type":"a","data":"\ud800"}`,
	`{"type":"a","data":1,"type":"b"}`, `{"type":"a b","data":1}`, `{"type":"a","data":1,"x":2}`, `{"type":"a","data":01}`,
	`{"type":"a","data":1,"external_id":""}`, `{"type":"a","data":1,"endpoint_ids":[""]}`, `{"type":"a"}`, `{"data":1}`,
	`{"type":"a","data":[1,2}`, `{"type":"a","data":1}x`, `{"type":"\u0061","data":1}`, `{"type":"a","data":nul}`,
	`{"type":"a","data":"` + string(make([]byte, 2000)) + `"}`,
}

func checkFastParse(t *testing.T, s *Server, body []byte, batch bool) {
	t.Helper()
	var fast []storage.NewEvent
	var ok bool
	if batch {
		fast, ok = s.fastBatch(body)
	} else {
		var ev storage.NewEvent
		if ev, ok = s.fastEvent(body); ok {
			fast = []storage.NewEvent{ev}
		}
	}
	if !ok {
		return
	}
	if !utf8.Valid(body) {
		return // parseEvents takes the fast path only for UTF-8
	}
	slow, err := s.slowEvents(body, batch)
	if err != nil {
		t.Fatalf("%q (batch %v): the fast path accepted what the slow one refuses: %v", body, batch, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q (batch %v): fast path %+v, slow path %+v", body, batch, fast, slow)
	}
}

func TestFastParseMatchesSlowParse(t *testing.T) {
	s := &Server{cfg: Config{MaxPayloadBytes: 1024}}
	plain := 0
	for _, seed := range fastParseSeeds {
		for _, batch := range []bool{false, true} {
			body := seed
			if batch {
				body = `{"events":[` + seed + `,` + seed + `]}`
			}
			checkFastParse(t, s, []byte(body), batch)
			if _, ok := s.fastEvent([]byte(seed)); ok {
				plain++
			}
		}
	}
	if plain < 8 { // the first four seeds, single and counted twice
		t.Fatalf("only %d plain seeds took the fast path", plain)
	}
	if evs, ok := s.fastBatch([]byte(`{"events":[{"type":"a","data":1,"external_id":"x"},{"type":"b","data":2,"external_id":"x"}]}`)); ok {
		t.Fatalf("a batch repeating an external_id took the fast path: %+v", evs)
	}
}
