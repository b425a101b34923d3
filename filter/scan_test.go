package filter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/buger/jsonparser"
)

// scanOne scans data for one path and returns what it reaches, as Match
// reads it: the scan's hit, followed the rest of the way.
func scanOne(data []byte, path []string) []value {
	found := make([]hit, 1)
	s := scan{d: data, paths: [][]string{path}, found: found}
	s.run()
	if !found[0].ok {
		return nil
	}
	return follow(found[0].v, found[0].t, path[found[0].n:], nil)
}

// referenceValues is what the filter read before it had its own scan, and
// the specification the scan keeps to on valid JSON: the first occurrence
// of the whole path through objects (jsonparser.EachKey), else the path
// followed step by step from the top (jsonparser.Get).
func referenceValues(data []byte, path []string) []value {
	var vals []value
	found := false
	jsonparser.EachKey(data, func(i int, v []byte, t jsonparser.ValueType, err error) {
		if i >= 0 && err == nil {
			vals, found = follow(v, t, nil, nil), true
		}
	}, path)
	if found {
		return vals
	}
	if v, t, _, err := jsonparser.Get(data); err == nil {
		return follow(v, t, path, nil)
	}
	return nil
}

// show writes values as "type:text" for comparing and messages.
func show(vals []value) string {
	var b strings.Builder
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(' ')
		}
		text := string(v.raw)
		if v.t == jsonparser.String && !v.plain {
			text = v.s
		}
		fmt.Fprintf(&b, "%s:%s", v.t, text)
	}
	return b.String()
}

func TestScan(t *testing.T) {
	tests := []struct {
		data, path, want string
	}{
		// strings skipped whole: escaped quotes, backslash runs, brackets
		// inside them, short and past the byte-by-byte prefix
		{`{"s":"a\"b\\","t":1}`, "t", "number:1"},
		{`{"s":"a\"b\\","t":1}`, "s", `string:a"b\`},
		{`{"s":"\\\\\"}","t":2}`, "t", "number:2"},
		{`{"s":"0123456789abcdefgh\"ij\\\\","t":3}`, "t", "number:3"},
		{`{"s":"0123456789abcdefgh\\","t":4}`, "t", "number:4"},
		{`{"p":"}{][\"","x":{"y":"}"}}`, "x.y", "string:}"},
		{`{"p":{"s":"{{{"},"x":5}`, "x", "number:5"},
		// nested objects and arrays skipped by depth, whatever they hold
		{`{"p":[{"x":[1,{"y":"]"}]}],"x":{"y":7}}`, "x.y", "number:7"},
		{`{"p":{"x":{"y":0}},"x":{"y":8}}`, "x.y", "number:8"},
		{`{"p":[[[],[{}]],{"q":[]}],"x":9}`, "x", "number:9"},
		// keys that are prefixes of others, or look like paths
		{`{"ord":1,"orders":2,"order":{"id":3}}`, "order.id", "number:3"},
		{`{"order.id":9,"order":{"id":3}}`, "order.id", "number:3"},
		{`{"order":{"i":1,"idx":2}}`, "order.id", ""},
		// duplicate keys: the first occurrence of the whole path wins,
		// looking through duplicate parents
		{`{"a":1,"a":2}`, "a", "number:1"},
		{`{"a":{"b":1},"a":{"b":2}}`, "a.b", "number:1"},
		{`{"a":{"x":1},"a":{"b":2}}`, "a.b", "number:2"},
		{`{"a":[{"b":1}],"a":{"b":2}}`, "a.b", "number:2"},
		{`{"c":{"a":{"b":4}},"a":{"b":5}}`, "a.b", "number:5"},
		// escapes in keys are read as their text
		{`{"\u00e9t\u00e9":1}`, "été", "number:1"},
		{`{"\"q\"":{"x\\y":2}}`, `"q".x\y`, "number:2"},
		{`{"\ud83d\ude00":3}`, "😀", "number:3"},
		{`{"a\u0062":4,"a":{"b":5}}`, "a.b", "number:5"},
		// whitespace anywhere JSON allows it
		{" {\n\t\"a\" :\r { \"b\" : [ 1 , 2 ] } } ", "a.b", "array:[ 1 , 2 ] number:1 number:2"},
		// through arrays: follow takes it from the array on
		{`{"a":[{"b":1},{"c":0},{"b":2}]}`, "a.b", "number:1 number:2"},
		{`{"a":[{"b":1}],"a":[{"b":2}]}`, "a.b", "number:1"},
		{`{"a":[10,20]}`, "a.1", "number:20"},
		{`[{"a":1},{"a":2}]`, "a", "number:1 number:2"},
		// a path that meets a string or a literal reaches nothing
		{`{"a":"str"}`, "a.b", ""},
		{`{"a":null}`, "a.b", ""},
		// literals
		{`{"a":true,"b":false,"c":null,"d":-1.5e3}`, "d", "number:-1.5e3"},
		{`{"a":true,"b":false,"c":null,"d":-1.5e3}`, "b", "boolean:false"},
		{`{"a":true,"b":false,"c":null,"d":-1.5e3}`, "c", "null:null"},
		// malformed: what was read before the fault stays, nothing after
		{`{"a":"x`, "a", ""},
		{`{"a":1,"b":`, "a", "number:1"},
		{`{"a":1,"b":`, "b", ""},
		{`{"a" 1}`, "a", ""},
		{`{"p":[1,2,"a":1}`, "a", ""},
		{`{"a":{"b":1`, "a.b", "number:1"},
		{`{"s":"\`, "s", ""},
		{``, "a", ""},
	}
	for _, tt := range tests {
		got := show(scanOne([]byte(tt.data), strings.Split(tt.path, ".")))
		if got != tt.want {
			t.Errorf("%s at %s: %q, want %q", tt.data, tt.path, got, tt.want)
		}
	}
}

// TestScanPaths: several paths in one scan, sharing prefixes, each found
// as if scanned alone.
func TestScanPaths(t *testing.T) {
	data := []byte(`{"pad":[{"order":{"id":0}}],"order":{"id":"o_1","lines":[{"sku":"A"},{"sku":"B"}],"ship":{"to":"DE"}},"order":{"note":"late"}}`)
	paths := [][]string{{"order", "id"}, {"order", "lines", "sku"}, {"order", "ship", "to"}, {"order", "note"}, {"order", "none"}, {"order"}}
	found := make([]hit, len(paths))
	s := scan{d: data, paths: paths, found: found}
	s.run()
	for i, p := range paths {
		var got []value
		if found[i].ok {
			got = follow(found[i].v, found[i].t, p[found[i].n:], nil)
		}
		if g, w := show(got), show(scanOne(data, p)); g != w {
			t.Errorf("%v: %q with the others, %q alone", p, g, w)
		}
		if g, w := show(got), show(referenceValues(data, p)); g != w {
			t.Errorf("%v: %q, reference %q", p, g, w)
		}
	}
}

// FuzzScan: on valid JSON the scan reads every path as the reference
// (jsonparser, which the filter used before) does, and on any input it
// never panics.
func FuzzScan(f *testing.F) {
	f.Add(`{"s":"a\"b\\","t":{"u":[1,{"v":2}]}}`, "t.u.v")
	f.Add(`{"a":{"x":1},"a":{"b":2}}`, "a.b")
	f.Add(`{"\u00e9":{"b":[true,null]}}`, "é.b")
	f.Add(`[{"a":1},{"a":[2,3]}]`, "a.1")
	f.Add(`{"0123456789abcdefghij\\\"":{"k":"v"}}`, `0123456789abcdefghij\".k`)
	f.Fuzz(func(t *testing.T, data, dotted string) {
		path := strings.Split(dotted, ".")
		if len(path) > MaxPathDepth || strings.Contains("."+dotted+".", "..") {
			return
		}
		got := show(scanOne([]byte(data), path))
		if !json.Valid([]byte(data)) || duplicateKeys([]byte(data)) {
			return // jsonparser and the scan may read these differently
		}
		if want := show(referenceValues([]byte(data), path)); got != want {
			t.Fatalf("%s at %q: %q, reference %q", data, dotted, got, want)
		}
	})
}

// duplicateKeys tells whether an object in the valid JSON data has a key
// twice (encoding/json compares keys unescaped).
func duplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next token is a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if n := len(stack); n > 0 && stack[n-1].object {
			top := &stack[n-1]
			if top.key {
				if k, ok := tok.(string); ok {
					if top.keys[k] {
						return true
					}
					top.keys[k] = true
					top.key = false
					continue
				}
			} else {
				top.key = true
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]bool{}, object: true, key: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}
