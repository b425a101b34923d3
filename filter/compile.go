package filter

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/buger/jsonparser"
)

// compiler turns a decoded filter document (numbers as json.Number) into
// groups and conditions, counting them against MaxConditions.
type compiler struct {
	conds int
	paths [][]string
}

// group compiles a filter object at field (its name for errors), nested
// depth deep in logical operators.
func (c *compiler) group(v any, field string, depth int) (*group, error) {
	if depth > MaxDepth {
		return nil, &Error{Field: field, Message: fmt.Sprintf("$and, $or and $not may nest at most %d deep", MaxDepth)}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, &Error{Field: field, Message: "a filter must be a JSON object of conditions"}
	}
	g := &group{}
	for _, k := range sortedKeys(obj) {
		val := obj[k]
		switch {
		case k == "$and" || k == "$or":
			sub, err := c.list(k, val, field, depth)
			if err != nil {
				return nil, err
			}
			if k == "$or" {
				sub = &group{any: true, groups: sub.groups}
			}
			g.groups = append(g.groups, sub)
		case k == "$not":
			sub, err := c.group(val, field, depth+1)
			if err != nil {
				return nil, notErr(err, "$not takes one filter object")
			}
			sub.not = !sub.not
			g.groups = append(g.groups, sub)
		case strings.HasPrefix(k, "$"):
			return nil, &Error{Field: field, Message: fmt.Sprintf("unknown operator %s: a filter's keys are paths (type, data.…) or $and, $or, $not", k)}
		default:
			cd, err := c.cond(k, val)
			if err != nil {
				return nil, err
			}
			g.conds = append(g.conds, cd)
		}
	}
	return g, nil
}

// list compiles the array of filters of $and or $or.
func (c *compiler) list(name string, v any, field string, depth int) (*group, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return nil, &Error{Field: field, Message: name + " takes a non-empty array of filter objects"}
	}
	g := &group{}
	for i, e := range arr {
		sub, err := c.group(e, field, depth+1)
		if err != nil {
			return nil, notErr(err, fmt.Sprintf("%s[%d] must be a filter object", name, i))
		}
		g.groups = append(g.groups, sub)
	}
	return g, nil
}

// notErr keeps a nested error, or replaces the "not an object" error of a
// nested filter with msg.
func notErr(err error, msg string) error {
	if e, ok := err.(*Error); ok && strings.HasPrefix(e.Message, "a filter must be") {
		return &Error{Field: e.Field, Message: msg}
	}
	return err
}

// cond compiles the condition on path.
func (c *compiler) cond(path string, v any) (*cond, error) {
	field := "filter." + path
	segs := strings.Split(path, ".")
	if segs[0] != "type" && segs[0] != "data" {
		return nil, &Error{Field: field, Message: "a path starts with type or data (as data.order.total)"}
	}
	if len(segs) > MaxPathDepth {
		return nil, &Error{Field: field, Message: fmt.Sprintf("a path may have at most %d segments", MaxPathDepth)}
	}
	if segs[0] == "type" && len(segs) > 1 {
		return nil, &Error{Field: field, Message: "type is a string: it has no fields"}
	}
	for _, s := range segs[1:] {
		if s == "" {
			return nil, &Error{Field: field, Message: "a path has no empty segments"}
		}
	}
	ops, err := c.ops(v, field)
	if err != nil {
		return nil, err
	}
	cd := &cond{path: segs[1:], typ: segs[0] == "type", idx: -1, ops: ops}
	if !cd.typ && len(cd.path) > 0 {
		cd.idx = slices.IndexFunc(c.paths, func(p []string) bool { return slices.Equal(p, cd.path) })
		if cd.idx < 0 {
			cd.idx = len(c.paths)
			c.paths = append(c.paths, cd.path)
		}
	}
	return cd, nil
}

// ops compiles a path's value: an object of operators, or a bare value
// ($eq).
func (c *compiler) ops(v any, field string) ([]op, error) {
	obj, isObj := v.(map[string]any)
	if !isObj || !hasOperator(obj) {
		c.conds++
		if c.conds > MaxConditions {
			return nil, &Error{Field: field, Message: fmt.Sprintf("a filter may have at most %d conditions", MaxConditions)}
		}
		a, err := operandOf(v, field, "$eq")
		if err != nil {
			return nil, err
		}
		return []op{{kind: opEq, arg: a}}, nil
	}
	var ops []op
	for _, name := range sortedKeys(obj) {
		kind, ok := opNames[name]
		if !ok {
			if strings.HasPrefix(name, "$") {
				return nil, &Error{Field: field, Message: fmt.Sprintf("unknown operator %s (the operators are $eq $ne $in $nin $gt $gte $lt $lte $exists $regex $not)", name)}
			}
			return nil, &Error{Field: field, Message: fmt.Sprintf("%q beside operators: an object of operators has only $ keys", name)}
		}
		c.conds++
		if c.conds > MaxConditions {
			return nil, &Error{Field: field, Message: fmt.Sprintf("a filter may have at most %d conditions", MaxConditions)}
		}
		o, err := c.op(kind, name, obj[name], field)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o)
	}
	return ops, nil
}

func hasOperator(obj map[string]any) bool {
	for k := range obj {
		if strings.HasPrefix(k, "$") {
			return true
		}
	}
	return false
}

// op compiles one operator and its argument.
func (c *compiler) op(kind opKind, name string, v any, field string) (op, error) {
	o := op{kind: kind}
	switch kind {
	case opEq, opNe:
		a, err := operandOf(v, field, name)
		o.arg = a
		return o, err
	case opIn, opNin:
		arr, ok := v.([]any)
		if !ok {
			return o, &Error{Field: field, Message: name + " takes an array of values"}
		}
		for _, e := range arr {
			a, err := operandOf(e, field, name)
			if err != nil {
				return o, err
			}
			o.set = append(o.set, a)
		}
		return o, nil
	case opGt, opGte, opLt, opLte:
		a, err := operandOf(v, field, name)
		if err == nil && a.t != jsonparser.Number && a.t != jsonparser.String {
			err = &Error{Field: field, Message: name + " takes a number or a string"}
		}
		o.arg = a
		return o, err
	case opExists:
		b, ok := v.(bool)
		if !ok {
			return o, &Error{Field: field, Message: "$exists takes true or false"}
		}
		o.exists = b
		return o, nil
	case opRegex:
		s, ok := v.(string)
		if !ok {
			return o, &Error{Field: field, Message: "$regex takes a string (an RE2 pattern)"}
		}
		if len(s) > MaxRegex {
			return o, &Error{Field: field, Message: fmt.Sprintf("$regex: a pattern may be at most %d bytes", MaxRegex)}
		}
		re, err := regexp.Compile(s)
		if err != nil {
			return o, &Error{Field: field, Message: "$regex: " + err.Error()}
		}
		o.re = re
		return o, nil
	}
	// $not: an object of operators.
	obj, ok := v.(map[string]any)
	if !ok || len(obj) == 0 || !hasOperator(obj) {
		return o, &Error{Field: field, Message: "$not takes an object of operators (as {\"$regex\": \"^test\"})"}
	}
	not, err := c.ops(obj, field)
	o.not = not
	return o, err
}

// operandOf is an operator's argument.
func operandOf(v any, field, name string) (operand, error) {
	switch x := v.(type) {
	case string:
		return operand{t: jsonparser.String, s: x}, nil
	case json.Number:
		n, err := x.Float64()
		if err != nil || math.IsInf(n, 0) {
			return operand{}, &Error{Field: field, Message: name + ": number out of range"}
		}
		return operand{t: jsonparser.Number, n: n}, nil
	case bool:
		return operand{t: jsonparser.Boolean, b: x}, nil
	case nil:
		return operand{t: jsonparser.Null}, nil
	case []any:
		return operand{t: jsonparser.Array, complex: x}, nil
	case map[string]any:
		return operand{t: jsonparser.Object, complex: x}, nil
	}
	return operand{}, &Error{Field: field, Message: name + ": not a JSON value"}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
