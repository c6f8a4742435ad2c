package rules

import (
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// maxNesting is encoding/json's limit of nested objects and arrays:
// a body nested deeper is not JSON to it, so not to parseJSON either.
const maxNesting = 10000

// parser decodes one JSON value in a single pass, to the values
// encoding/json's Decoder with UseNumber followed by numbers gives: it
// accepts exactly what that decoder accepts, and decodes strings the
// same way (invalid UTF-8 and lone surrogates become U+FFFD). A
// differential test and a fuzz test hold it to that.
type parser struct {
	b []byte
	// s is b as one string: the strings without escapes are its
	// substrings, not copies of their own.
	s     string
	i     int
	depth int
}

// parseJSON decodes b into maps, slices, strings, bools, nil, int64
// (a number written without fraction or exponent that fits) and
// float64 (any other number). b must hold one JSON value, with white
// space around it or not.
func parseJSON(b []byte) (any, error) {
	p := parser{b: b, s: string(b)}
	p.space()
	if p.i == len(b) {
		return nil, errNotJSON
	}
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(b) {
		return nil, errNotJSON
	}
	return v, nil
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value() (any, error) {
	if p.i >= len(p.b) {
		return nil, errNotJSON
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, errNotJSON
}

func (p *parser) literal(s string) error {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return errNotJSON
	}
	p.i += len(s)
	return nil
}

func (p *parser) object() (any, error) {
	if p.depth++; p.depth > maxNesting {
		return nil, errNotJSON
	}
	p.i++ // {
	m := make(map[string]any)
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		p.depth--
		return m, nil
	}
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, errNotJSON
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, errNotJSON
		}
		p.i++
		p.space()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		m[k] = v
		done, err := p.next('}')
		if err != nil {
			return nil, err
		}
		if done {
			return m, nil
		}
	}
}

func (p *parser) array() (any, error) {
	if p.depth++; p.depth > maxNesting {
		return nil, errNotJSON
	}
	p.i++ // [
	l := []any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		p.depth--
		return l, nil
	}
	for {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		l = append(l, v)
		done, err := p.next(']')
		if err != nil {
			return nil, err
		}
		if done {
			return l, nil
		}
	}
}

// next reads what follows a member or an element: a comma, or end, which
// closes the container and reports done.
func (p *parser) next(end byte) (done bool, err error) {
	p.space()
	switch {
	case p.i >= len(p.b):
		return false, errNotJSON
	case p.b[p.i] == ',':
		p.i++
		p.space()
		return false, nil
	case p.b[p.i] == end:
		p.i++
		p.depth--
		return true, nil
	}
	return false, errNotJSON
}

// number reads a number of JSON's grammar: an int64 when it has no
// fraction or exponent and fits, else a float64 (±Inf past float64's
// range), as numbers does.
func (p *parser) number() (any, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	integral := true
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case p.i < len(p.b) && p.b[p.i] >= '1' && p.b[p.i] <= '9':
		p.digits()
	default:
		return nil, errNotJSON
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		integral = false
		p.i++
		if p.digits() == 0 {
			return nil, errNotJSON
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		integral = false
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return nil, errNotJSON
		}
	}
	s := p.b[start:p.i]
	if integral {
		// Up to 18 digits cannot overflow an int64.
		if d := s; len(d) <= 18 || (d[0] == '-' && len(d) <= 19) {
			neg := d[0] == '-'
			if neg {
				d = d[1:]
			}
			var n int64
			for _, c := range d {
				n = n*10 + int64(c-'0')
			}
			if neg {
				n = -n
			}
			return n, nil
		}
		if n, err := strconv.ParseInt(string(s), 10, 64); err == nil {
			return n, nil
		}
	}
	f, _ := strconv.ParseFloat(string(s), 64) // ±Inf past float64's range
	return f, nil
}

// digits skips decimal digits and returns how many.
func (p *parser) digits() int {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}

// str reads a string at p.i (at its opening quote).
func (p *parser) str() (string, error) {
	p.i++ // "
	start := p.i
	ascii := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.s[start:p.i]
			p.i++
			if ascii || utf8.ValidString(s) {
				return s, nil
			}
			return p.unquote(start)
		case c == '\\':
			return p.unquote(start)
		case c < ' ':
			return "", errNotJSON
		case c >= utf8.RuneSelf:
			ascii = false
		}
		p.i++
	}
	return "", errNotJSON
}

// unescaped is the byte each one-letter escape stands for.
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// unquote decodes the string that starts at start (after its quote),
// with escapes or invalid UTF-8, as encoding/json does, and moves p.i
// past its closing quote.
func (p *parser) unquote(start int) (string, error) {
	s := p.b
	r := start
	out := make([]byte, 0, 64)
	for r < len(s) {
		switch c := s[r]; {
		case c == '"':
			p.i = r + 1
			return string(out), nil
		case c == '\\':
			r++
			if r >= len(s) {
				return "", errNotJSON
			}
			switch s[r] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				out = append(out, unescaped[s[r]])
				r++
			case 'u':
				rr := hex4(s[r+1:])
				if rr < 0 {
					return "", errNotJSON
				}
				r += 5
				if utf16.IsSurrogate(rr) {
					if len(s)-r >= 6 && s[r] == '\\' && s[r+1] == 'u' {
						if rr1 := hex4(s[r+2:]); rr1 >= 0 {
							if dec := utf16.DecodeRune(rr, rr1); dec != unicode.ReplacementChar {
								// A valid pair; consume.
								r += 6
								out = utf8.AppendRune(out, dec)
								break
							}
						}
					}
					// Invalid surrogate; fall back to replacement rune.
					rr = unicode.ReplacementChar
				}
				out = utf8.AppendRune(out, rr)
			default:
				return "", errNotJSON
			}
		case c < ' ':
			return "", errNotJSON
		case c < utf8.RuneSelf:
			out = append(out, c)
			r++
		default:
			// Coerce to well-formed UTF-8.
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			out = utf8.AppendRune(out, rr)
		}
	}
	return "", errNotJSON
}

// hex4 reads four hex digits, or returns -1.
func hex4(s []byte) rune {
	if len(s) < 4 {
		return -1
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
