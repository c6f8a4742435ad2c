package jsonptr

import (
	"errors"
	"regexp"
	"strings"
)

// Pointer is a parsed JSON pointer (RFC 6901): the reference tokens in order.
type Pointer []string

// ParsePointer parses s, which must be "" (the whole document) or start with
// "/". It returns an error for any other string and for a "~" not followed by
// 0 or 1.
func ParsePointer(s string) (Pointer, error) {
	if s == "" {
		return Pointer{}, nil
	}
	if s[0] != '/' {
		return nil, errors.New("a JSON pointer starts with /")
	}
	parts := strings.Split(s[1:], "/")
	for i, p := range parts {
		for j := 0; j < len(p); j++ {
			if p[j] == '~' && (j+1 == len(p) || (p[j+1] != '0' && p[j+1] != '1')) {
				return nil, errors.New("~ must be followed by 0 or 1 in a JSON pointer")
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return Pointer(parts), nil
}

// arrayIndex is RFC 6901's array-index: 0, or digits without a leading zero.
var arrayIndex = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// ErrNotFound means the pointer does not resolve in the document.
var ErrNotFound = errors.New("no value at the JSON pointer")

// ErrNotString means the pointer resolves to a value that is neither a string
// nor a number.
var ErrNotString = errors.New("the value at the JSON pointer is not a string or number")

// String resolves p in the JSON document doc and returns the string (or the
// literal text of the number) there. It returns ErrNotFound when a member or
// index is missing, ErrNotString for objects, arrays, booleans and null, and
// an error wrapping ErrSyntax for a body that is not JSON. The document is
// read once, as a stream (Extract), whatever its size and shape.
func (p Pointer) String(doc []byte) (string, error) {
	vals, err := Extract(doc, []Pointer{p})
	if err != nil {
		return "", err
	}
	v := vals[0]
	switch {
	case !v.Found:
		return "", ErrNotFound
	case v.Kind == KindString || v.Kind == KindNumber:
		return v.Str, nil
	default:
		return "", ErrNotString
	}
}
