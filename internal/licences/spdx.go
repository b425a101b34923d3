package licences

import (
	"errors"
	"fmt"
	"strings"
)

// CheckExpression judges an SPDX licence expression, as npm's "license"
// fields hold them: "MIT", "(MIT OR Apache-2.0)", "MIT AND CC0-1.0".
// A choice (OR) is allowed when one side is; a combination (AND) when both
// are. An exception (WITH) only adds permissions, so the licence it is
// attached to decides. An expression that does not parse is refused.
func CheckExpression(expr string) Verdict {
	p := &spdxParser{tokens: tokenize(expr)}
	v, err := p.or()
	if err == nil && p.pos < len(p.tokens) {
		err = fmt.Errorf("unexpected %q", p.tokens[p.pos])
	}
	if err != nil {
		return Verdict{Note: fmt.Sprintf("not an SPDX expression (%v)", err)}
	}
	return v
}

func tokenize(expr string) []string {
	expr = strings.NewReplacer("(", " ( ", ")", " ) ").Replace(expr)
	return strings.Fields(expr)
}

type spdxParser struct {
	tokens []string
	pos    int
}

func (p *spdxParser) peek(word string) bool {
	return p.pos < len(p.tokens) && strings.EqualFold(p.tokens[p.pos], word)
}

// or is: and { OR and }.
func (p *spdxParser) or() (Verdict, error) {
	v, err := p.and()
	for err == nil && p.peek("OR") {
		p.pos++
		var w Verdict
		if w, err = p.and(); err == nil && !v.Allowed {
			v = w
		}
	}
	return v, err
}

// and is: with { AND with }.
func (p *spdxParser) and() (Verdict, error) {
	v, err := p.with()
	for err == nil && p.peek("AND") {
		p.pos++
		var w Verdict
		if w, err = p.with(); err == nil {
			v = both(v, w)
		}
	}
	return v, err
}

// with is: "(" or ")" | ID [ WITH EXCEPTION ].
func (p *spdxParser) with() (Verdict, error) {
	if p.pos >= len(p.tokens) {
		return Verdict{}, errors.New("unexpected end")
	}
	tok := p.tokens[p.pos]
	p.pos++
	var v Verdict
	switch {
	case tok == "(":
		var err error
		if v, err = p.or(); err != nil {
			return v, err
		}
		if !p.peek(")") {
			return v, errors.New(`missing ")"`)
		}
		p.pos++
	case tok == ")", strings.EqualFold(tok, "AND"), strings.EqualFold(tok, "OR"), strings.EqualFold(tok, "WITH"):
		return v, fmt.Errorf("unexpected %q", tok)
	default:
		v = Check(tok)
	}
	if p.peek("WITH") {
		p.pos += 2
		if p.pos > len(p.tokens) {
			return v, errors.New("WITH names no exception")
		}
	}
	return v, nil
}

// both is the verdict on two licences that apply together.
func both(a, b Verdict) Verdict {
	switch {
	case !a.Allowed:
		return a
	case !b.Allowed:
		return b
	case a.Note == "":
		return b
	}
	return a
}
