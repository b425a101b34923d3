package transform

import (
	"strings"
	"testing"

	"github.com/dop251/goja"
)

// TestParseJSONAsJSONParse: parseJSON makes what the runtime's JSON.parse
// makes of the same text (compared through JSON.stringify, which keeps key
// order), and refuses what JSON.parse refuses.
func TestParseJSONAsJSONParse(t *testing.T) {
	vm := goja.New()
	parse, _ := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("parse"))
	stringify, _ := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("stringify"))
	show := func(v goja.Value) string {
		s, err := stringify(goja.Undefined(), v)
		if err != nil {
			t.Fatal(err)
		}
		return s.String()
	}
	good := []string{`{}`, `[]`, `0`, `-0`, `1.5e3`, `-12`, `9007199254740993`, `"a\"b\\u00e9\n"`, `true`, `null`,
		` {"b":1, "a":[1, 2.5, "x", {"z":null}], "c":{"d":{"e":[]}}} `, `{"a":1,"a":2}`, `{"__proto__":{"x":1}}`,
		`{"emoji":"😀","esc":"\ud83d\ude00"}`, `[[[[1]]]]`}
	for _, doc := range good {
		want, err := parse(goja.Undefined(), vm.ToValue(doc))
		if err != nil {
			t.Fatalf("JSON.parse(%s): %v", doc, err)
		}
		got, err := parseJSON(vm, []byte(doc))
		if err != nil {
			t.Fatalf("parseJSON(%s): %v", doc, err)
		}
		if show(got) != show(want) {
			t.Errorf("parseJSON(%s) = %s, JSON.parse %s", doc, show(got), show(want))
		}
	}
	// goja's JSON.parse refuses a number past float64 (encoding/json's
	// range error); a browser's, and parseJSON, make it Infinity.
	if inf, err := parseJSON(vm, []byte(`1e400`)); err != nil || show(inf) != "null" || inf.ToFloat() <= 1e308 {
		t.Errorf("parseJSON(1e400) = %v, %v; want Infinity", inf, err)
	}
	proto, _ := parseJSON(vm, []byte(`{"__proto__":{"x":1}}`))
	if x := proto.ToObject(vm).Get("x"); x != nil && !goja.IsUndefined(x) {
		t.Errorf(`"__proto__" became the prototype: x = %v`, x)
	}
	bad := []string{``, `{`, `[1,]`, `{"a":1,}`, `01`, `-`, `1.`, `tru`, `"a`, "\"\x01\"", `{"a" 1}`, `[1 2]`, `1 2`, `{a:1}`,
		strings.Repeat("[", maxJSONDepth+2) + strings.Repeat("]", maxJSONDepth+2)}
	for _, doc := range bad {
		if _, err := parseJSON(vm, []byte(doc)); err == nil {
			t.Errorf("parseJSON(%q) took it", doc)
		}
	}
}
