package transform

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/dop251/goja"
)

// errNotJSON is what parseJSON says of text that is not one JSON value.
var errNotJSON = errors.New("not JSON")

// maxJSONDepth bounds the nesting parseJSON follows (its recursion).
const maxJSONDepth = 1000

// parseJSON makes the runtime's value of JSON text, as JSON.parse would:
// objects with their keys in the text's order (own properties, "__proto__"
// too), arrays, strings, numbers, booleans and null. goja's own JSON.parse
// reads its input token by token through encoding/json's Decoder, which was
// two thirds of a transformation's time on a 4 KiB payload; this reads the
// bytes once.
func parseJSON(vm *goja.Runtime, data []byte) (goja.Value, error) {
	p := jsonParser{vm: vm, b: data}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if p.space(); p.i != len(p.b) {
		return nil, errNotJSON
	}
	return v, nil
}

type jsonParser struct {
	vm *goja.Runtime
	b  []byte
	i  int
}

func (p *jsonParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (goja.Value, error) {
	if depth > maxJSONDepth {
		return nil, errNotJSON
	}
	p.space()
	if p.i >= len(p.b) {
		return nil, errNotJSON
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return p.vm.ToValue(s), nil
	case c == 't':
		return p.word("true", p.vm.ToValue(true))
	case c == 'f':
		return p.word("false", p.vm.ToValue(false))
	case c == 'n':
		return p.word("null", goja.Null())
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return nil, errNotJSON
}

func (p *jsonParser) word(w string, v goja.Value) (goja.Value, error) {
	if len(p.b)-p.i < len(w) || string(p.b[p.i:p.i+len(w)]) != w {
		return nil, errNotJSON
	}
	p.i += len(w)
	return v, nil
}

func (p *jsonParser) object(depth int) (goja.Value, error) {
	p.i++ // {
	obj := p.vm.NewObject()
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return obj, nil
	}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, errNotJSON
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		if p.space(); p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, errNotJSON
		}
		p.i++
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		if k == "__proto__" { // an own property, as JSON.parse makes it, not the prototype
			err = obj.DefineDataProperty(k, v, goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE)
		} else {
			err = obj.Set(k, v)
		}
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.b) {
			return nil, errNotJSON
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return obj, nil
		default:
			return nil, errNotJSON
		}
	}
}

func (p *jsonParser) array(depth int) (goja.Value, error) {
	p.i++ // [
	var items []any
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return p.vm.NewArray(), nil
	}
	for {
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		items = append(items, v)
		p.space()
		if p.i >= len(p.b) {
			return nil, errNotJSON
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return p.vm.NewArray(items...), nil
		default:
			return nil, errNotJSON
		}
	}
}

// str reads a string at p.i (its opening quote): without escapes, the bytes
// as they are; with them, through encoding/json (rare in payloads).
func (p *jsonParser) str() (string, error) {
	start := p.i
	p.i++
	escaped := false
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			if !escaped {
				return string(p.b[start+1 : p.i-1]), nil
			}
			var s string
			if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
				return "", errNotJSON
			}
			return s, nil
		case c == '\\':
			escaped = true
			p.i += 2
		case c < 0x20:
			return "", errNotJSON
		default:
			p.i++
		}
	}
	return "", errNotJSON
}

func (p *jsonParser) number() (goja.Value, error) {
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			p.i++
			continue
		}
		break
	}
	text := p.b[start:p.i]
	if !json.Valid(text) { // the grammar of a JSON number (no leading zeros, no bare "-")
		return nil, errNotJSON
	}
	if n, err := strconv.ParseInt(string(text), 10, 64); err == nil && n >= -(1<<53) && n <= 1<<53 && string(text) != "-0" {
		return p.vm.ToValue(n), nil
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, errNotJSON
	}
	return p.vm.ToValue(f), nil
}
