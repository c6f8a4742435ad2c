package rules

import (
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"github.com/hookgate/hookgate/internal/jsonstr"
)

// jsonWriter writes a transform's result as JSON in one pass: the bytes
// encoding/json gives for what native makes of the value (maps with
// sorted keys, no white space, no HTML escaping), without building the
// Go value. It takes from budget what native takes. It stops, returning
// false, at whatever native would refuse (a value JSON cannot carry, a
// nesting deeper than maxDepth) and once the budget is spent; then
// marshalJSON falls back to native and encoding/json, which make the
// error. The body's maps and lists are written from the parse's Go
// values, without converting them to CEL's.
type jsonWriter struct {
	buf    []byte
	budget int
}

func (w *jsonWriter) value(v ref.Val, depth int) bool {
	if depth > maxDepth || w.budget < 0 {
		return false
	}
	// The body's maps and lists, and their parts, hold the parse's Go
	// values, which CEL's adapter converts as goValue expects.
	if m, ok := v.(traits.Mapper); ok {
		if g, ok := m.Value().(map[string]any); ok {
			return w.goMap(g, depth)
		}
	}
	if l, ok := v.(traits.Lister); ok {
		if g, ok := l.Value().([]any); ok {
			return w.goList(g, depth)
		}
	}
	w.budget--
	switch x := v.(type) {
	case types.Null:
		w.buf = append(w.buf, "null"...)
	case types.Bool:
		w.buf = strconv.AppendBool(w.buf, bool(x))
	case types.Int:
		w.buf = strconv.AppendInt(w.buf, int64(x), 10)
	case types.Uint:
		w.buf = strconv.AppendUint(w.buf, uint64(x), 10)
	case types.Double:
		return w.float(float64(x))
	case types.String:
		return w.str(string(x))
	case types.Bytes:
		n := base64.StdEncoding.EncodedLen(len(x))
		if w.budget -= n + 2; w.budget < 0 {
			return false
		}
		w.buf = append(w.buf, '"')
		w.buf = base64.StdEncoding.AppendEncode(w.buf, x)
		w.buf = append(w.buf, '"')
	case types.Timestamp:
		w.buf = jsonstr.Append(w.buf, x.Time.UTC().Format(time.RFC3339Nano))
	case types.Duration:
		w.buf = jsonstr.Append(w.buf, x.String())
	case traits.Mapper:
		return w.mapper(x, depth)
	case traits.Lister:
		w.buf = append(w.buf, '[')
		first := true
		for it := x.Iterator(); it.HasNext() == types.True; {
			if !first {
				w.buf = append(w.buf, ',')
			}
			first = false
			if !w.value(it.Next(), depth+1) {
				return false
			}
		}
		w.buf = append(w.buf, ']')
	default:
		return false
	}
	return true
}

func (w *jsonWriter) mapper(x traits.Mapper, depth int) bool {
	if m, ok := x.Value().(map[ref.Val]ref.Val); ok {
		// The maps CEL builds: their entries, without Get's lookups.
		return w.refValMap(m, depth)
	}
	var keys []string
	for it := x.Iterator(); it.HasNext() == types.True; {
		k, ok := it.Next().(types.String)
		if !ok {
			return false
		}
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	w.buf = append(w.buf, '{')
	for i, k := range keys {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.budget -= len(k) + 3
		w.buf = jsonstr.Append(w.buf, k)
		w.buf = append(w.buf, ':')
		if !w.value(x.Get(types.String(k)), depth+1) {
			return false
		}
	}
	w.buf = append(w.buf, '}')
	return true
}

type entry struct {
	k string
	v ref.Val
}

func (w *jsonWriter) refValMap(m map[ref.Val]ref.Val, depth int) bool {
	es := make([]entry, 0, len(m))
	for k, v := range m {
		ks, ok := k.(types.String)
		if !ok {
			return false
		}
		es = append(es, entry{string(ks), v})
	}
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.k, b.k) })
	w.buf = append(w.buf, '{')
	for i, e := range es {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.budget -= len(e.k) + 3
		w.buf = jsonstr.Append(w.buf, e.k)
		w.buf = append(w.buf, ':')
		if !w.value(e.v, depth+1) {
			return false
		}
	}
	w.buf = append(w.buf, '}')
	return true
}

// goValue writes a value of a parsed body; false for a Go type the
// parse does not make.
func (w *jsonWriter) goValue(v any, depth int) bool {
	if depth > maxDepth || w.budget < 0 {
		return false
	}
	switch x := v.(type) {
	case map[string]any:
		return w.goMap(x, depth)
	case []any:
		return w.goList(x, depth)
	}
	w.budget--
	switch x := v.(type) {
	case nil:
		w.buf = append(w.buf, "null"...)
	case bool:
		w.buf = strconv.AppendBool(w.buf, x)
	case int64:
		w.buf = strconv.AppendInt(w.buf, x, 10)
	case float64:
		return w.float(x)
	case string:
		return w.str(x)
	default:
		return false
	}
	return true
}

func (w *jsonWriter) goMap(m map[string]any, depth int) bool {
	w.budget--
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.buf = append(w.buf, '{')
	for i, k := range keys {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.budget -= len(k) + 3
		w.buf = jsonstr.Append(w.buf, k)
		w.buf = append(w.buf, ':')
		if !w.goValue(m[k], depth+1) {
			return false
		}
	}
	w.buf = append(w.buf, '}')
	return true
}

func (w *jsonWriter) goList(l []any, depth int) bool {
	w.budget--
	w.buf = append(w.buf, '[')
	for i, e := range l {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		if !w.goValue(e, depth+1) {
			return false
		}
	}
	w.buf = append(w.buf, ']')
	return true
}

func (w *jsonWriter) str(s string) bool {
	if w.budget -= len(s) + 2; w.budget < 0 {
		return false
	}
	w.buf = jsonstr.Append(w.buf, s)
	return true
}

// float writes f as encoding/json does: like ES6, %f between 1e-6 and
// 1e21, else %e with the exponent unpadded. NaN and ±Inf stop.
func (w *jsonWriter) float(f float64) bool {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b := strconv.AppendFloat(w.buf, f, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	w.buf = b
	return true
}
