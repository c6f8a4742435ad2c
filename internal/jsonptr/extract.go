package jsonptr

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Kind is the JSON type of an extracted value.
type Kind uint8

// The kinds of JSON values.
const (
	KindNone   Kind = iota // no value (Value.Found is false)
	KindString             // Value.Str is the decoded string
	KindNumber             // Value.Str is the number's literal text
	KindBool               // Value.Str is "true" or "false"
	KindNull
	KindObject
	KindArray
)

// Value is what Extract found at one pointer. Raw is the value's JSON text,
// a sub-slice of the document (not a copy); Str is set for strings (decoded),
// numbers (their literal text, never reformatted) and booleans. When a member
// name occurs twice in an object, the last one counts, as with
// encoding/json.
type Value struct {
	Found bool
	Kind  Kind
	Str   string
	Raw   []byte
}

// MaxExtractPointers is the most pointers one Extract call resolves.
const MaxExtractPointers = 64

// MaxJSONDepth is the deepest nesting of arrays and objects Extract accepts
// (as encoding/json).
const MaxJSONDepth = 10000

// ErrSyntax is wrapped by Extract's errors for a document that is not one
// valid JSON value.
var ErrSyntax = errors.New("not valid JSON")

// Extract resolves every pointer of ptrs in the JSON document doc in one
// pass over it, and returns one Value per pointer, in order (Found false
// where a member or index is missing, or the path runs into a scalar). It
// validates the whole document as it goes: an error wrapping ErrSyntax for
// anything but exactly one JSON value (whitespace around it allowed),
// nesting deeper than MaxJSONDepth included. It allocates only for the
// values asked for (and for member names with escapes that a pointer may
// match), whatever the document's shape; Raw of a found value points into
// doc. More than MaxExtractPointers pointers is an error.
func Extract(doc []byte, ptrs []Pointer) ([]Value, error) {
	if len(ptrs) > MaxExtractPointers {
		return nil, fmt.Errorf("extract: %d pointers, at most %d", len(ptrs), MaxExtractPointers)
	}
	x := extractor{doc: doc, ptrs: ptrs, out: make([]Value, len(ptrs))}
	live := uint64(0)
	if len(ptrs) > 0 {
		live = ^uint64(0) >> (64 - len(ptrs))
	}
	x.skipSpace()
	if err := x.value(live, 0); err != nil {
		return nil, err
	}
	x.skipSpace()
	if x.pos != len(doc) {
		return nil, x.errorf("data after the JSON value")
	}
	return x.out, nil
}

type extractor struct {
	doc     []byte
	pos     int
	ptrs    []Pointer
	out     []Value
	scratch []byte // decoded member names with escapes
}

func (x *extractor) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: byte %d: %s", ErrSyntax, x.pos, fmt.Sprintf(format, args...))
}

func (x *extractor) skipSpace() {
	for x.pos < len(x.doc) {
		switch x.doc[x.pos] {
		case ' ', '\t', '\n', '\r':
			x.pos++
		default:
			return
		}
	}
}

// value parses the value at pos (after whitespace). live has a bit for each
// pointer whose first depth tokens lead here; those with exactly depth
// tokens point at this value.
func (x *extractor) value(live uint64, depth int) error {
	if x.pos >= len(x.doc) {
		return x.errorf("unexpected end of input")
	}
	start := x.pos
	var here uint64 // pointers that end at this value
	for l := live; l != 0; l &= l - 1 {
		if i := bits.TrailingZeros64(l); len(x.ptrs[i]) == depth {
			here |= 1 << i
		}
	}
	live &^= here
	var (
		kind Kind
		str  string
	)
	switch c := x.doc[x.pos]; {
	case c == '{':
		kind = KindObject
		if err := x.object(live, depth+1); err != nil {
			return err
		}
	case c == '[':
		kind = KindArray
		if err := x.array(live, depth+1); err != nil {
			return err
		}
	case c == '"':
		kind = KindString
		end, escaped, err := x.scanString()
		if err != nil {
			return err
		}
		if here != 0 {
			if raw := x.doc[start+1 : end-1]; !escaped && utf8.Valid(raw) {
				str = string(raw) // one copy
			} else {
				str = string(unquote(raw, escaped, nil))
			}
		}
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if len(x.doc)-x.pos >= len(lit) && string(x.doc[x.pos:x.pos+len(lit)]) == lit {
				x.pos += len(lit)
				kind, str = KindBool, lit
				if lit == "null" {
					kind, str = KindNull, ""
				}
				break
			}
		}
		if kind == KindNone {
			return x.errorf("invalid literal")
		}
	case c == '-' || (c >= '0' && c <= '9'):
		kind = KindNumber
		if err := x.number(); err != nil {
			return err
		}
		if here != 0 {
			str = string(x.doc[start:x.pos])
		}
	default:
		return x.errorf("invalid character %q looking for a value", c)
	}
	for ; here != 0; here &= here - 1 {
		x.out[bits.TrailingZeros64(here)] = Value{Found: true, Kind: kind, Str: str, Raw: x.doc[start:x.pos]}
	}
	return nil
}

func (x *extractor) object(live uint64, depth int) error {
	if depth > MaxJSONDepth {
		return x.errorf("nesting deeper than %d", MaxJSONDepth)
	}
	x.pos++ // {
	x.skipSpace()
	if x.pos < len(x.doc) && x.doc[x.pos] == '}' {
		x.pos++
		return nil
	}
	for {
		if x.pos >= len(x.doc) || x.doc[x.pos] != '"' {
			return x.errorf("expected a member name")
		}
		start := x.pos
		end, escaped, err := x.scanString()
		if err != nil {
			return err
		}
		var child uint64
		if live != 0 {
			name := x.doc[start+1 : end-1]
			if escaped || !utf8.Valid(name) {
				x.scratch = unquote(name, escaped, x.scratch[:0])
				name = x.scratch
			}
			for l := live; l != 0; l &= l - 1 {
				i := bits.TrailingZeros64(l)
				if x.ptrs[i][depth-1] == string(name) {
					child |= 1 << i
				}
			}
		}
		x.skipSpace()
		if x.pos >= len(x.doc) || x.doc[x.pos] != ':' {
			return x.errorf("expected ':' after a member name")
		}
		x.pos++
		x.skipSpace()
		// A member name given twice: the last one counts, so what an
		// earlier one led to is forgotten.
		for l := child; l != 0; l &= l - 1 {
			x.out[bits.TrailingZeros64(l)] = Value{}
		}
		if err := x.value(child, depth); err != nil {
			return err
		}
		x.skipSpace()
		if x.pos >= len(x.doc) {
			return x.errorf("unexpected end of input in an object")
		}
		switch x.doc[x.pos] {
		case ',':
			x.pos++
			x.skipSpace()
		case '}':
			x.pos++
			return nil
		default:
			return x.errorf("expected ',' or '}' in an object")
		}
	}
}

func (x *extractor) array(live uint64, depth int) error {
	if depth > MaxJSONDepth {
		return x.errorf("nesting deeper than %d", MaxJSONDepth)
	}
	x.pos++ // [
	x.skipSpace()
	if x.pos < len(x.doc) && x.doc[x.pos] == ']' {
		x.pos++
		return nil
	}
	// Only pointers whose token here is an array index can go on.
	var indexed uint64
	for l := live; l != 0; l &= l - 1 {
		i := bits.TrailingZeros64(l)
		if tok := x.ptrs[i][depth-1]; arrayIndex.MatchString(tok) {
			indexed |= 1 << i
		}
	}
	for n := 0; ; n++ {
		var child uint64
		for l := indexed; l != 0; l &= l - 1 {
			i := bits.TrailingZeros64(l)
			if idx, err := strconv.Atoi(x.ptrs[i][depth-1]); err == nil && idx == n {
				child |= 1 << i
			}
		}
		if err := x.value(child, depth); err != nil {
			return err
		}
		x.skipSpace()
		if x.pos >= len(x.doc) {
			return x.errorf("unexpected end of input in an array")
		}
		switch x.doc[x.pos] {
		case ',':
			x.pos++
			x.skipSpace()
		case ']':
			x.pos++
			return nil
		default:
			return x.errorf("expected ',' or ']' in an array")
		}
	}
}

// scanString checks the string at pos and moves past it; it returns the
// position after its closing quote and whether it has escapes.
func (x *extractor) scanString() (end int, escaped bool, err error) {
	x.pos++ // "
	for x.pos < len(x.doc) {
		switch c := x.doc[x.pos]; {
		case c == '"':
			x.pos++
			return x.pos, escaped, nil
		case c == '\\':
			escaped = true
			if x.pos+1 >= len(x.doc) {
				return 0, false, x.errorf("unexpected end of input in a string")
			}
			switch x.doc[x.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				x.pos += 2
			case 'u':
				if x.pos+6 > len(x.doc) {
					return 0, false, x.errorf("unexpected end of input in a string")
				}
				for _, h := range x.doc[x.pos+2 : x.pos+6] {
					if !isHex(h) {
						return 0, false, x.errorf("invalid \\u escape")
					}
				}
				x.pos += 6
			default:
				return 0, false, x.errorf("invalid escape in a string")
			}
		case c < 0x20:
			return 0, false, x.errorf("control character in a string")
		default:
			x.pos++
		}
	}
	return 0, false, x.errorf("unexpected end of input in a string")
}

// number moves past the number at pos, checking RFC 8259's grammar.
func (x *extractor) number() error {
	d := x.doc
	if d[x.pos] == '-' {
		x.pos++
	}
	switch {
	case x.pos < len(d) && d[x.pos] == '0':
		x.pos++
	case x.pos < len(d) && d[x.pos] >= '1' && d[x.pos] <= '9':
		for x.pos < len(d) && d[x.pos] >= '0' && d[x.pos] <= '9' {
			x.pos++
		}
	default:
		return x.errorf("invalid number")
	}
	if x.pos < len(d) && d[x.pos] == '.' {
		x.pos++
		if x.pos >= len(d) || d[x.pos] < '0' || d[x.pos] > '9' {
			return x.errorf("invalid number")
		}
		for x.pos < len(d) && d[x.pos] >= '0' && d[x.pos] <= '9' {
			x.pos++
		}
	}
	if x.pos < len(d) && (d[x.pos] == 'e' || d[x.pos] == 'E') {
		x.pos++
		if x.pos < len(d) && (d[x.pos] == '+' || d[x.pos] == '-') {
			x.pos++
		}
		if x.pos >= len(d) || d[x.pos] < '0' || d[x.pos] > '9' {
			return x.errorf("invalid number")
		}
		for x.pos < len(d) && d[x.pos] >= '0' && d[x.pos] <= '9' {
			x.pos++
		}
	}
	return nil
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func hexVal(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// unquote appends the decoded contents of a string that scanString checked
// (without its quotes) to dst, as encoding/json decodes it: invalid UTF-8
// and unpaired surrogates become U+FFFD.
func unquote(s []byte, escaped bool, dst []byte) []byte {
	if !escaped && utf8.Valid(s) {
		return append(dst, s...)
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			switch s[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hexVal(s[i+2 : i+6])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						if r2 := utf16.DecodeRune(r, hexVal(s[i+2:i+6])); r2 != utf8.RuneError {
							i += 6
							dst = utf8.AppendRune(dst, r2)
							continue
						}
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // " \ /
				dst = append(dst, s[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			dst = utf8.AppendRune(dst, r)
			i += size
		}
	}
	return dst
}
