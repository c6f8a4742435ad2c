package events

import (
	"unicode/utf8"
)

// appendHeadersJSON appends h as a JSON object of string arrays, as
// encoding/json would encode it but without sorting the keys (jsonb does not
// keep their order) and without reflection: the request headers are encoded
// on every delivery.
func appendHeadersJSON(dst []byte, h map[string][]string) []byte {
	dst = append(dst, '{')
	first := true
	for k, vs := range h {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendJSONString(dst, k)
		dst = append(dst, ':', '[')
		for i, v := range vs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, v)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendRuleErrorsJSON appends errs as a JSON array of objects, each
// message cut to [MaxRuleErrorBytes].
func appendRuleErrorsJSON(dst []byte, errs []RuleError) []byte {
	dst = append(dst, '[')
	for i, e := range errs {
		if i > 0 {
			dst = append(dst, ',')
		}
		msg := e.Error
		if len(msg) > MaxRuleErrorBytes {
			msg = msg[:MaxRuleErrorBytes] // a cut character becomes U+FFFD
		}
		dst = append(dst, `{"target":`...)
		dst = appendJSONString(dst, e.Target)
		dst = append(dst, `,"rule":`...)
		dst = appendJSONString(dst, e.Rule)
		dst = append(dst, `,"error":`...)
		dst = appendJSONString(dst, msg)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Like encoding/json it escapes
// control characters, quotes and backslashes, and replaces invalid UTF-8
// with U+FFFD (PostgreSQL's jsonb refuses invalid UTF-8).
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
