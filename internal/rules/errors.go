package rules

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Error is a rule's error: at compile time or when it runs.
type Error struct {
	// Rule is the field of the expression at fault: "filter", "transform"
	// or "transform_headers".
	Rule string
	// Msg is CEL's message, or ours. It holds no body or header value.
	Msg string
	err error
}

func (e *Error) Error() string { return e.Rule + ": " + e.Msg }

// Unwrap returns the error Msg came from, if any: never show it.
func (e *Error) Unwrap() error { return e.err }

func errorf(rule, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Rule: rule, Msg: err.Error(), err: errors.Unwrap(err)}
}

// evalError reports a rule's evaluation error with CEL's message, less
// anything of the delivery it may quote: an error goes to logs, the
// console and the API, and the body and headers may hold secrets.
func evalError(rule string, err error, src string, a *Activation) error {
	msg := scrub(err.Error(), src, a)
	if strings.Contains(msg, "no such attribute(s): body") && a.jsonBody() == nil {
		msg += " (the body is not JSON: read raw)"
	}
	return &Error{Rule: rule, Msg: msg}
}

// quoted finds a quoted part of a message; afterKey the key CEL names
// in "no such key: K" and "key K already exists".
var (
	quoted   = regexp.MustCompile(`"[^"]*"|'[^']*'|` + "`[^`]*`")
	afterKey = regexp.MustCompile(`(no such key: |key )(.+?)( already exists|$)`)
)

var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// celWords are words CEL quotes in its messages that are not data.
var celWords = map[string]bool{
	"bool": true, "int": true, "uint": true, "double": true, "string": true,
	"bytes": true, "list": true, "map": true, "null_type": true, "type": true,
	"google.protobuf.Timestamp": true, "google.protobuf.Duration": true,
	"timestamp": true, "duration": true, "optional_type": true, "dyn": true,
}

const masked = "…"

// scrub masks, in a CEL message, every quoted part and every named key
// but the names the rule's own source uses, and every string of the
// delivery (a header value, a string in the JSON body) that the
// message holds and the source does not.
func scrub(msg, src string, a *Activation) string {
	// A name the rule uses (a key, a function) is kept. Any other text,
	// even from the source, may be a value: a ${VAR} filled in there.
	keep := func(s string) bool {
		return s == "" || celWords[s] || ident.MatchString(s) && strings.Contains(src, s)
	}
	msg = quoted.ReplaceAllStringFunc(msg, func(q string) string {
		if keep(q[1 : len(q)-1]) {
			return q
		}
		return q[:1] + masked + q[len(q)-1:]
	})
	msg = afterKey.ReplaceAllStringFunc(msg, func(m string) string {
		p := afterKey.FindStringSubmatch(m)
		if keep(p[2]) || p[2] == masked {
			return m
		}
		return p[1] + masked + p[3]
	})
	if a == nil {
		return msg
	}
	for _, vs := range a.in.Headers {
		for _, v := range vs {
			msg = maskValue(msg, v, src)
		}
	}
	if a.jsonBody() != nil {
		walkStrings(a.tree, func(s string) { msg = maskValue(msg, s, src) })
		return msg
	}
	// Not JSON: mask every longer word of the message that the body has.
	return word.ReplaceAllStringFunc(msg, func(w string) string {
		if len(w) < 6 || strings.Contains(src, w) || !bytes.Contains(a.in.Body, []byte(w)) {
			return w
		}
		return masked
	})
}

var word = regexp.MustCompile(`[^\s"'` + "`" + `:,;()\[\]{}<>=]+`)

// maskValue masks v in msg, where it stands as a whole, unless it is
// short or the source holds it.
func maskValue(msg, v, src string) string {
	if len(v) < 3 || strings.Contains(src, v) || !strings.Contains(msg, v) {
		return msg
	}
	var b strings.Builder
	for {
		i := strings.Index(msg, v)
		if i < 0 {
			break
		}
		j := i + len(v)
		if (i == 0 || !wordByte(msg[i-1])) && (j == len(msg) || !wordByte(msg[j])) {
			b.WriteString(msg[:i])
			b.WriteString(masked)
		} else {
			b.WriteString(msg[:j])
		}
		msg = msg[j:]
	}
	b.WriteString(msg)
	return b.String()
}

func wordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// walkStrings calls f with every string value in a parsed JSON value.
func walkStrings(v any, f func(string)) {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			walkStrings(e, f)
		}
	case []any:
		for _, e := range x {
			walkStrings(e, f)
		}
	case string:
		f(x)
	}
}
