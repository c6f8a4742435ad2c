package rules

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/textproto"
	"slices"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// Transform is a compiled transform: an expression for the forwarded
// body, one for added headers, or both. It is compiled once per
// configuration and safe for concurrent use.
type Transform struct {
	bodySrc, hdrSrc string
	body, hdr       cel.Program
}

// Result is what a transform makes of a delivery.
type Result struct {
	// Body is the forwarded body; nil means the body is unchanged.
	Body []byte
	// ContentType is the Content-Type the forward carries: application/json
	// for a map or a list, else the sender's, unless the headers set one.
	ContentType string
	// Headers are the headers to add, by canonical name, without
	// Content-Type (which is in ContentType).
	Headers map[string]string
}

// CompileTransform compiles a transform's body expression and its
// headers expression; either may be "" (but not both). The body's must
// return a map, a list, a string or bytes; the headers' a map of
// strings to strings. costLimit applies to each expression (0:
// DefaultCostLimit; above MaxCostLimit is refused).
func CompileTransform(body, headers string, costLimit uint64) (*Transform, error) {
	if body == "" && headers == "" {
		return nil, errorf("transform", "no expression")
	}
	t := &Transform{bodySrc: body, hdrSrc: headers}
	if body != "" {
		prg, typ, err := compile("transform", body, costLimit)
		if err != nil {
			return nil, err
		}
		switch typ.Kind() {
		case types.MapKind, types.ListKind, types.StringKind, types.BytesKind, types.DynKind, types.AnyKind:
		default:
			return nil, errorf("transform", "the expression must return a map, a list, a string or bytes, not %s", typeName(typ))
		}
		t.body = prg
	}
	if headers != "" {
		prg, typ, err := compile("transform_headers", headers, costLimit)
		if err != nil {
			return nil, err
		}
		if !headersType(typ) {
			return nil, errorf("transform_headers", "the expression must return a map of strings to strings, not %s", typeName(typ))
		}
		t.hdr = prg
	}
	return t, nil
}

// headersType accepts map(string, string) and what may turn out to be
// one at run time (dyn keys or values).
func headersType(t *cel.Type) bool {
	if isDyn(t) {
		return true
	}
	if t.Kind() != types.MapKind {
		return false
	}
	p := t.Parameters()
	ok := func(x *cel.Type) bool { return x.Kind() == types.StringKind || isDyn(x) }
	return len(p) == 2 && ok(p[0]) && ok(p[1])
}

// Apply runs the transform on a delivery. A body over maxBytes (when
// maxBytes > 0), an evaluation error, the cost limit, a header that is
// not valid or that a transform may not set: each is an error.
func (t *Transform) Apply(a *Activation, maxBytes int) (Result, error) {
	r := Result{ContentType: a.in.ContentType}
	if t.body != nil {
		v, _, err := t.body.Eval(a)
		if err != nil {
			return Result{}, evalError("transform", err, t.bodySrc, a)
		}
		switch x := v.(type) {
		case types.String:
			r.Body = []byte(string(x))
		case types.Bytes:
			r.Body = []byte(x)
		case traits.Mapper, traits.Lister:
			b, err := marshalJSON(v, maxBytes)
			if err != nil {
				return Result{}, errorf("transform", "%w", err)
			}
			r.Body, r.ContentType = b, "application/json"
		default:
			return Result{}, errorf("transform", "returned %s, not a map, a list, a string or bytes", v.Type().TypeName())
		}
		if r.Body == nil {
			r.Body = []byte{}
		}
		if maxBytes > 0 && len(r.Body) > maxBytes {
			return Result{}, errorf("transform", "the body would be %d bytes, over the limit of %d", len(r.Body), maxBytes)
		}
	}
	if t.hdr != nil {
		v, _, err := t.hdr.Eval(a)
		if err != nil {
			return Result{}, evalError("transform_headers", err, t.hdrSrc, a)
		}
		h, err := headerMap(v)
		if err != nil {
			return Result{}, errorf("transform_headers", "%w", err)
		}
		if ct, ok := h["Content-Type"]; ok {
			r.ContentType = ct
			delete(h, "Content-Type")
		}
		r.Headers = h
	}
	return r, nil
}

// forbidden are the headers a transform may not set: hop-by-hop and
// framing headers, and those hookgate sets on every forward (its
// signature, the event's ID, the idempotency key). Proxy-* and
// X-Hookgate-* too.
var forbidden = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Trailers": true, "Transfer-Encoding": true, "Upgrade": true,
	"Host": true, "Content-Length": true, "Content-Encoding": true,
	"Webhook-Id": true, "Webhook-Signature": true, "Webhook-Timestamp": true,
	"Idempotency-Key": true,
}

// headerMap checks a headers result and returns it by canonical name.
func headerMap(v ref.Val) (map[string]string, error) {
	m, ok := v.(traits.Mapper)
	if !ok {
		return nil, fmt.Errorf("returned %s, not a map", v.Type().TypeName())
	}
	// In name order, so that the same result gives the same error.
	var keys []types.String
	for it := m.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		ks, ok := k.(types.String)
		if !ok {
			return nil, fmt.Errorf("a header name is %s, not a string", k.Type().TypeName())
		}
		keys = append(keys, ks)
	}
	slices.Sort(keys)
	out := make(map[string]string, len(keys))
	size := 0
	for _, k := range keys {
		name := string(k)
		if !validName(name) {
			return nil, fmt.Errorf("a header name is not a valid HTTP token")
		}
		c := textproto.CanonicalMIMEHeaderKey(name)
		if forbidden[c] || strings.HasPrefix(c, "X-Hookgate-") || strings.HasPrefix(c, "Proxy-") {
			return nil, fmt.Errorf("a transform may not set the header %s", c)
		}
		if _, dup := out[c]; dup {
			return nil, fmt.Errorf("the header %s is set twice", c)
		}
		val, ok := m.Get(k).(types.String)
		if !ok {
			return nil, fmt.Errorf("the value of header %s is %s, not a string", c, m.Get(k).Type().TypeName())
		}
		if !validValue(string(val)) {
			return nil, fmt.Errorf("the value of header %s has a control character (CR, LF or NUL)", c)
		}
		if size += len(c) + len(val) + 4; size > maxHeaderBytes {
			return nil, fmt.Errorf("the headers would be over %d bytes", maxHeaderBytes)
		}
		out[c] = string(val)
	}
	return out, nil
}

// validName reports whether s is an RFC 9110 token.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validValue refuses what would split or end a header: CR, LF, NUL and
// other control characters but tab.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// marshalJSON encodes a CEL value as JSON, maps with sorted keys, so
// that the same delivery always gives the same bytes.
// The result is counted as it is converted, and refused once over
// maxBytes (or maxResultBytes): a list that repeats a large value many
// times is cheap in CEL and would be huge as JSON.
func marshalJSON(v ref.Val, maxBytes int) ([]byte, error) {
	if maxBytes <= 0 || maxBytes > maxResultBytes {
		maxBytes = maxResultBytes
	}
	w := jsonWriter{buf: make([]byte, 0, 1024), budget: maxBytes}
	if w.value(v, 0) && w.budget >= 0 {
		return w.buf, nil
	}
	// The writer stopped: a value JSON cannot carry, too deep, or near
	// the limit. Convert and encode, which gives the error, or the body
	// when the budget only ran short in the writer's order.
	return convertJSON(v, maxBytes)
}

// convertJSON converts v with native and encodes it with encoding/json.
func convertJSON(v ref.Val, maxBytes int) ([]byte, error) {
	budget := maxBytes
	n, err := native(v, 0, &budget)
	if errors.Is(err, errOverBudget) {
		return nil, fmt.Errorf("the body would be over the limit of %d bytes", maxBytes)
	}
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(n); err != nil {
		return nil, fmt.Errorf("encode the result as JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

var errOverBudget = errors.New("the body would be over the limit")

// maxDepth bounds the nesting of a result.
const maxDepth = 1000

// native converts a CEL value to what encoding/json encodes. It takes
// from budget at least the bytes each value will be in JSON.
func native(v ref.Val, depth int, budget *int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("the result is nested deeper than %d", maxDepth)
	}
	if *budget < 0 {
		return nil, errOverBudget
	}
	*budget--
	switch x := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		return uint64(x), nil
	case types.Double:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("a number in the result is NaN or infinite: JSON has none")
		}
		return f, nil
	case types.String:
		*budget -= len(x) + 2
		return string(x), nil
	case types.Bytes:
		*budget -= base64.StdEncoding.EncodedLen(len(x)) + 2
		if *budget < 0 {
			return nil, errOverBudget
		}
		return base64.StdEncoding.EncodeToString(x), nil
	case types.Timestamp:
		return x.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return x.String(), nil
	case traits.Mapper:
		out := make(map[string]any)
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("a map key in the result is %s: JSON keys are strings", k.Type().TypeName())
			}
			*budget -= len(ks) + 3
			e, err := native(x.Get(k), depth+1, budget)
			if err != nil {
				return nil, err
			}
			out[string(ks)] = e
		}
		return out, nil
	case traits.Lister:
		sz, _ := x.Size().(types.Int)
		out := make([]any, 0, int(sz))
		for it := x.Iterator(); it.HasNext() == types.True; {
			e, err := native(it.Next(), depth+1, budget)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	return nil, fmt.Errorf("the result holds a %s, which JSON cannot carry", v.Type().TypeName())
}
