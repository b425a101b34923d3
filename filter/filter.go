// Package filter is an endpoint's event filter (SPEC §3, "Filters and
// transformations"): a JSON document of conditions on an event's type and
// data, checked and compiled once when it is set, then matched against
// each event of a type the endpoint subscribes to, in the event write
// path.
//
// A filter is an object of conditions that must all hold. A key is a
// dotted path — "type", "data", or "data.order.total"; a numeric segment
// indexes an array, any other segment applied to an array looks into each
// element — or a logical operator: "$and" and "$or" take a non-empty array
// of filters, "$not" one filter. A path's value is a bare JSON value
// (equality) or an object of operators, all of which must hold: $eq $ne
// $in $nin $gt $gte $lt $lte $exists $regex (RE2, so no pattern can take
// more than linear time) and $not (an object of operators). Where a path
// reaches several values (through an array, or an array itself), a
// condition holds when one of them satisfies it; $ne and $nin hold when
// none equals. A path that reaches nothing satisfies only $ne, $nin,
// "$exists": false and a $not around anything else.
//
// Matching reads only the paths the filter names, straight from the
// event's JSON text, in one pass over it that skips what no path names
// (scan); an event is never decoded whole.
package filter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/buger/jsonparser"
)

// Limits of a filter, so that none costs more to match than a few
// microseconds per condition.
const (
	MaxBytes      = 16 << 10 // the filter's JSON text
	MaxConditions = 64       // operators and equalities, over the whole filter
	MaxDepth      = 8        // nesting of $and, $or and $not
	MaxPathDepth  = 16       // segments of one path
	MaxRegex      = 1024     // bytes of one $regex pattern
)

// Filter is a compiled filter. Its zero value is no filter: it matches
// every event. It is safe for concurrent use.
type Filter struct {
	root  *group
	paths [][]string // the data paths its conditions name, found in one scan
}

// Error is a filter that cannot be compiled: Field is where, as the API
// names it ("filter" for a top-level operator, else "filter.<path>"), and
// Message says what is wrong, naming the operator.
type Error struct {
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Field + ": " + e.Message }

// Compile checks a filter document and compiles it. An empty or null
// document is no filter (nil, nil).
func Compile(doc []byte) (*Filter, error) {
	doc = bytes.TrimSpace(doc)
	if len(doc) == 0 || string(doc) == "null" {
		return nil, nil
	}
	if len(doc) > MaxBytes {
		return nil, &Error{Field: "filter", Message: fmt.Sprintf("a filter may be at most %d bytes", MaxBytes)}
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, &Error{Field: "filter", Message: "a filter must be a JSON object"}
	}
	c := compiler{}
	g, err := c.group(v, "filter", 0)
	if err != nil {
		return nil, err
	}
	return &Filter{root: g, paths: c.paths}, nil
}

// Match tells whether an event of type typ with data (its JSON text)
// passes the filter. A nil Filter passes everything.
func (f *Filter) Match(typ string, data []byte) bool {
	if f == nil || f.root == nil {
		return true
	}
	e := event{typ: typ, data: data}
	if len(f.paths) > 0 {
		e.found = make([]hit, len(f.paths))
		sc := scan{d: data, paths: f.paths, found: e.found}
		sc.run()
	}
	return f.root.match(&e)
}

// event is the event being matched: where the scan of its data paths
// ended, by their index in Filter.paths.
type event struct {
	typ   string
	data  []byte
	found []hit
}

// group is a conjunction (or, with any, a disjunction) of conditions and
// nested groups; not negates it.
type group struct {
	any    bool
	not    bool
	conds  []*cond
	groups []*group
}

func (g *group) match(e *event) bool {
	ok := g.eval(e)
	return ok != g.not
}

func (g *group) eval(e *event) bool {
	if g.any {
		for _, s := range g.groups {
			if s.match(e) {
				return true
			}
		}
		return false
	}
	for _, c := range g.conds {
		if !c.match(e) {
			return false
		}
	}
	for _, s := range g.groups {
		if !s.match(e) {
			return false
		}
	}
	return true
}

// cond is the operators on one path.
type cond struct {
	path []string // after its root
	typ  bool     // the root is "type" (else "data")
	idx  int      // the path's index in Filter.paths; -1: none (type, or data whole)
	ops  []op
}

func (c *cond) match(e *event) bool {
	var vals []value
	switch {
	case c.typ:
		vals = []value{{t: jsonparser.String, s: e.typ}}
	case c.idx >= 0:
		if h := e.found[c.idx]; h.ok {
			vals = follow(h.v, h.t, c.path[h.n:], nil)
		}
	default: // data whole
		if v, t, _, err := jsonparser.Get(e.data); err == nil {
			vals = follow(v, t, c.path, nil)
		}
	}
	for i := range c.ops {
		if !c.ops[i].holds(vals) {
			return false
		}
	}
	return true
}

// value is one JSON value a path reached.
type value struct {
	t     jsonparser.ValueType
	raw   []byte // the value's JSON text (a string's without its quotes)
	plain bool   // a string without escapes: raw is its text
	s     string // else a string's unescaped text
	n     float64
}

// follow follows path from the JSON value v of type t and appends the
// values it reaches to out: through an array, a numeric segment takes that
// element and any other looks into each element; a path that ends at an
// array reaches the array and each of its elements.
func follow(v []byte, t jsonparser.ValueType, path []string, out []value) []value {
	if len(path) == 0 {
		out = append(out, newValue(v, t))
		if t == jsonparser.Array {
			jsonparser.ArrayEach(v, func(e []byte, et jsonparser.ValueType, _ int, _ error) {
				out = append(out, newValue(e, et))
			})
		}
		return out
	}
	seg := path[0]
	switch t {
	case jsonparser.Object:
		if e, et, _, err := jsonparser.Get(v, seg); err == nil {
			out = follow(e, et, path[1:], out)
		}
	case jsonparser.Array:
		if isIndex(seg) {
			if e, et, _, err := jsonparser.Get(v, "["+seg+"]"); err == nil {
				out = follow(e, et, path[1:], out)
			}
			return out
		}
		jsonparser.ArrayEach(v, func(e []byte, et jsonparser.ValueType, _ int, _ error) {
			if et == jsonparser.Object {
				out = follow(e, et, path, out)
			}
		})
	}
	return out
}

func isIndex(seg string) bool {
	if seg == "" || len(seg) > 9 {
		return false
	}
	for _, r := range seg {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func newValue(raw []byte, t jsonparser.ValueType) value {
	v := value{t: t, raw: raw}
	switch t {
	case jsonparser.String:
		if bytes.IndexByte(raw, '\\') < 0 {
			v.plain = true // its text is raw: compared without a copy
			break
		}
		s, err := jsonparser.ParseString(raw)
		if err != nil {
			v.t = jsonparser.Unknown
		}
		v.s = s
	case jsonparser.Number:
		n, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || math.IsInf(n, 0) {
			v.t = jsonparser.Unknown
		}
		v.n = n
	}
	return v
}

// opKind is an operator.
type opKind int

const (
	opEq opKind = iota
	opNe
	opIn
	opNin
	opGt
	opGte
	opLt
	opLte
	opExists
	opRegex
	opNot
)

var opNames = map[string]opKind{"$eq": opEq, "$ne": opNe, "$in": opIn, "$nin": opNin, "$gt": opGt, "$gte": opGte,
	"$lt": opLt, "$lte": opLte, "$exists": opExists, "$regex": opRegex, "$not": opNot}

// op is one compiled operator of a path.
type op struct {
	kind   opKind
	arg    operand   // $eq $ne $gt $gte $lt $lte
	set    []operand // $in $nin
	exists bool
	re     *regexp.Regexp
	not    []op // $not
}

// operand is an operator's argument.
type operand struct {
	t       jsonparser.ValueType
	s       string
	n       float64
	b       bool
	complex any // an object or array, compared as decoded JSON
}

func (o *op) holds(vals []value) bool {
	switch o.kind {
	case opNe:
		return !anyOf(vals, func(v *value) bool { return o.arg.equals(v) })
	case opNin:
		return !anyOf(vals, func(v *value) bool { return inSet(o.set, v) })
	case opExists:
		return (len(vals) > 0) == o.exists
	case opNot:
		for i := range o.not {
			if !o.not[i].holds(vals) {
				return true
			}
		}
		return false
	}
	return anyOf(vals, func(v *value) bool {
		switch o.kind {
		case opEq:
			return o.arg.equals(v)
		case opIn:
			return inSet(o.set, v)
		case opRegex:
			if v.t != jsonparser.String {
				return false
			}
			if v.plain {
				return o.re.Match(v.raw)
			}
			return o.re.MatchString(v.s)
		}
		c, ok := o.arg.compare(v)
		if !ok {
			return false
		}
		switch o.kind {
		case opGt:
			return c > 0
		case opGte:
			return c >= 0
		case opLt:
			return c < 0
		}
		return c <= 0 // opLte
	})
}

func anyOf(vals []value, f func(*value) bool) bool {
	for i := range vals {
		if f(&vals[i]) {
			return true
		}
	}
	return false
}

func inSet(set []operand, v *value) bool {
	for i := range set {
		if set[i].equals(v) {
			return true
		}
	}
	return false
}

// equals compares v with the operand as JSON values.
func (a *operand) equals(v *value) bool {
	if a.t != v.t {
		return false
	}
	switch a.t {
	case jsonparser.String:
		if v.plain {
			return string(v.raw) == a.s
		}
		return a.s == v.s
	case jsonparser.Number:
		return a.n == v.n
	case jsonparser.Boolean:
		return a.b == (string(v.raw) == "true")
	case jsonparser.Null:
		return true
	case jsonparser.Object, jsonparser.Array:
		var d any
		dec := json.NewDecoder(bytes.NewReader(v.raw))
		dec.UseNumber()
		if dec.Decode(&d) != nil {
			return false
		}
		return jsonEqual(a.complex, d)
	}
	return false
}

// compare orders v against the operand (v minus operand's sign): numbers
// with numbers, strings with strings; anything else does not compare.
func (a *operand) compare(v *value) (int, bool) {
	switch {
	case a.t == jsonparser.Number && v.t == jsonparser.Number:
		switch {
		case v.n > a.n:
			return 1, true
		case v.n < a.n:
			return -1, true
		}
		return 0, true
	case a.t == jsonparser.String && v.t == jsonparser.String:
		if v.plain {
			return bytes.Compare(v.raw, []byte(a.s)), true
		}
		return strings.Compare(v.s, a.s), true
	}
	return 0, false
}

// jsonEqual compares two decoded JSON values (numbers as json.Number, by
// value).
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		fx, e1 := x.Float64()
		fy, e2 := y.Float64()
		return e1 == nil && e2 == nil && fx == fy
	case []any:
		y, ok := b.([]any)
		return ok && slices.EqualFunc(x, y, jsonEqual)
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	}
	return a == b
}
