package filter

import (
	"bytes"
	"math/bits"

	"github.com/buger/jsonparser"
)

// A filter names at most MaxConditions paths (each path has at least one
// condition), so a set of them fits in a uint64: this fails to compile if
// MaxConditions grows past 64.
const _ = uint(64 - MaxConditions)

// pathSet is a set of paths by their index in Filter.paths.
type pathSet uint64

// scan finds the values at a filter's data paths in one pass over an
// event's data, reading only the objects on those paths and skipping
// everything else (a string by its closing quote, an object or array by
// counting brackets) without looking inside it.
//
// A path is followed through objects; its value is the first in document
// order that it reaches through objects alone, looking through duplicate
// keys at every level (as jsonparser.EachKey and Get do: the first
// occurrence of the whole path wins). Failing that, the scan keeps the
// first value other than an object (an array, a string, a number...) that
// the path meets before its end, with how many segments reached it, and
// follow takes the rest of the path from there.
//
// The scan checks only what it reads: on malformed JSON it stops where it
// finds the fault, and the values recorded before stay.
type scan struct {
	d     []byte
	paths [][]string
	found []hit
	done  pathSet // the paths whose whole length was found
}

// hit is where a path's scan ended: the value its first n segments reach
// (v is a string's text without quotes), if ok.
type hit struct {
	v  []byte
	t  jsonparser.ValueType
	n  int
	ok bool
}

// run scans s.d for all of s.paths.
func (s *scan) run() {
	i := skipSpace(s.d, 0)
	if i < len(s.d) {
		s.value(i, 0, s.all())
	}
}

// all is the set of every path.
func (s *scan) all() pathSet { return pathSet(1)<<len(s.paths) - 1 }

// value reads the value at s.d[i] that paths' first depth segments reach:
// it records it for the paths that end there, descends into it, if it is
// an object, for the others, or else records it as where they stopped if
// nothing did before. It returns the index after the value, or -1 to stop
// the scan (the data is malformed, or every path is found).
func (s *scan) value(i, depth int, paths pathSet) int {
	d := s.d
	var end int
	var v []byte
	var t jsonparser.ValueType
	switch c := d[i]; {
	case c == '{':
		var deeper pathSet
		for m := paths; m != 0; m &= m - 1 {
			if p := bits.TrailingZeros64(uint64(m)); len(s.paths[p]) > depth {
				deeper |= pathSet(1) << p
			}
		}
		if deeper != 0 {
			end = s.object(i, depth, deeper)
		} else {
			end = skipBlock(d, i)
		}
		paths &^= deeper
		if end < 0 || paths == 0 {
			return end
		}
		v, t = d[i:end], jsonparser.Object
	case c == '[':
		end = skipBlock(d, i)
		if end < 0 {
			return -1
		}
		v, t = d[i:end], jsonparser.Array
	case c == '"':
		q := stringEnd(d, i+1)
		if q < 0 {
			return -1
		}
		end = q + 1
		v, t = d[i+1:q], jsonparser.String
	default:
		end = literalEnd(d, i)
		v = d[i:end]
		t = literalType(v)
	}
	for m := paths; m != 0; m &= m - 1 {
		p := bits.TrailingZeros64(uint64(m))
		switch {
		case len(s.paths[p]) == depth:
			s.found[p] = hit{v: v, t: t, n: depth, ok: true}
			s.done |= pathSet(1) << p
		case !s.found[p].ok:
			s.found[p] = hit{v: v, t: t, n: depth, ok: true}
		}
	}
	if s.done == s.all() {
		return -1
	}
	return end
}

// object reads the object at s.d[i] for paths, whose first depth segments
// reach it: a key that is the next segment of a path not yet found is
// followed, every other value skipped. It returns the index after the
// object, or -1 to stop the scan.
func (s *scan) object(i, depth int, paths pathSet) int {
	d := s.d
	i = skipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1
	}
	var buf [64]byte
	for {
		if i >= len(d) || d[i] != '"' {
			return -1
		}
		q := stringEnd(d, i+1)
		if q < 0 {
			return -1
		}
		key := d[i+1 : q]
		i = skipSpace(d, q+1)
		if i >= len(d) || d[i] != ':' {
			return -1
		}
		i = skipSpace(d, i+1)
		if i >= len(d) {
			return -1
		}
		var next pathSet
		if open := paths &^ s.done; open != 0 {
			if bytes.IndexByte(key, '\\') >= 0 {
				k, err := jsonparser.Unescape(key, buf[:])
				if err != nil {
					return -1
				}
				key = k
			}
			for m := open; m != 0; m &= m - 1 {
				if p := bits.TrailingZeros64(uint64(m)); s.paths[p][depth] == string(key) {
					next |= pathSet(1) << p
				}
			}
		}
		if next != 0 {
			i = s.value(i, depth+1, next)
		} else {
			i = skipValue(d, i)
		}
		if i < 0 {
			return -1
		}
		i = skipSpace(d, i)
		if i >= len(d) {
			return -1
		}
		switch d[i] {
		case ',':
			i = skipSpace(d, i+1)
			continue
		case '}':
			return i + 1
		}
		return -1
	}
}

// skipValue returns the index after the value at d[i], or -1 if it does
// not end.
func skipValue(d []byte, i int) int {
	switch d[i] {
	case '{', '[':
		return skipBlock(d, i)
	case '"':
		if q := stringEnd(d, i+1); q >= 0 {
			return q + 1
		}
		return -1
	}
	return literalEnd(d, i)
}

// structural classes bytes for skipBlock.
var structural = [256]byte{'"': 1, '{': 2, '[': 2, '}': 3, ']': 3}

// skipBlock returns the index after the object or array at d[i], or -1 if
// it does not end. It counts brackets of both kinds together and skips
// strings whole; it does not check what lies between. The first bytes of
// a string are looked at here (a call for each of a padding's many short
// strings costs more than the loop), the rest of a long one by stringEnd.
func skipBlock(d []byte, i int) int {
	depth := 0
	for i < len(d) {
		switch structural[d[i]] {
		case 0:
			i++
		case 1:
			i++
			for n := min(len(d), i+16); ; {
				if i >= n {
					if i = stringEnd(d, i); i < 0 {
						return -1
					}
					break
				}
				if c := d[i]; c == '"' {
					break
				} else if c == '\\' {
					i++ // the escaped byte
				}
				i++
			}
			i++ // past the closing quote
		case 2:
			depth++
			i++
		default:
			depth--
			i++
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// stringEnd returns the index of the quote that closes the string whose
// text goes on from d[i] (d[i] is not an escaped byte), or -1 if none
// does. Most strings in events are short: their first bytes are looked at
// one by one, cheaper than a call to bytes.IndexByte, which searches the
// rest of a long one.
func stringEnd(d []byte, i int) int {
	for n := min(len(d), i+16); i < n; i++ {
		switch d[i] {
		case '"':
			return i
		case '\\':
			i++ // the escaped byte
		}
	}
	for i < len(d) {
		q := bytes.IndexByte(d[i:], '"')
		if q < 0 {
			return -1
		}
		q += i
		// The quote is escaped if an odd number of backslashes precede
		// it (back to d[i], which is not an escaped byte).
		b := q
		for b > i && d[b-1] == '\\' {
			b--
		}
		if (q-b)%2 == 0 {
			return q
		}
		i = q + 1
	}
	return -1
}

// literalEnd returns the index after the number, true, false or null at
// d[i]: the next delimiter.
func literalEnd(d []byte, i int) int {
	for ; i < len(d); i++ {
		switch d[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}

// literalType is the type of a literal, as jsonparser reads it: Unknown
// if it is no JSON literal.
func literalType(v []byte) jsonparser.ValueType {
	switch {
	case len(v) == 0:
		return jsonparser.Unknown
	case string(v) == "true" || string(v) == "false":
		return jsonparser.Boolean
	case string(v) == "null":
		return jsonparser.Null
	case v[0] == '-' || v[0] >= '0' && v[0] <= '9':
		return jsonparser.Number
	}
	return jsonparser.Unknown
}

func skipSpace(d []byte, i int) int {
	for i < len(d) {
		switch d[i] {
		case ' ', '\t', '\n', '\r':
			i++
			continue
		}
		return i
	}
	return i
}
