package events

import "github.com/hookgate/hookgate/internal/jsonstr"

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
		dst = jsonstr.Append(dst, k)
		dst = append(dst, ':', '[')
		for i, v := range vs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonstr.Append(dst, v)
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
		dst = jsonstr.Append(dst, e.Target)
		dst = append(dst, `,"rule":`...)
		dst = jsonstr.Append(dst, e.Rule)
		dst = append(dst, `,"error":`...)
		dst = jsonstr.Append(dst, msg)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}
