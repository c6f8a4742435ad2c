package rules

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"

	"cel.dev/cel-go/common/types/ref"
)

// sameJSON fails t unless marshalJSON gives the bytes or the error
// convertJSON (native then encoding/json) gives for v under maxBytes.
// Just under the limit, convertJSON's outcome depends on the order it
// walks a map in, which Go's maps draw at random: there the writer's
// must be one of those convertJSON gives.
func sameJSON(t *testing.T, what string, v ref.Val, maxBytes int) []byte {
	t.Helper()
	got, gerr := marshalJSON(v, maxBytes)
	var want []byte
	var werr error
	for range 500 {
		want, werr = convertJSON(v, orMax(maxBytes))
		if fmt.Sprint(gerr) == fmt.Sprint(werr) && bytes.Equal(got, want) {
			return got
		}
	}
	if true {
		t.Fatalf("%s (limit %d):\nwriter:        %q, %v\nencoding/json: %q, %v", what, maxBytes, got, gerr, want, werr)
	}
	return got
}

func orMax(n int) int {
	if n <= 0 || n > maxResultBytes {
		return maxResultBytes
	}
	return n
}

// The JSON a transform sends is the same, byte for byte and error for
// error, as native and encoding/json made of its result, on every shape:
// each scalar type, escapes, key order, the body's own maps and lists,
// maps and lists CEL built, values JSON cannot carry, nesting, and every
// limit around the result's size.
func TestJSONWriterMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	bodies := map[string][]byte{
		"scalars": []byte(`{"i":1,"n":-7,"f":1.0,"e":1e3,"E":2E-1,"max":9223372036854775807,"over":9223372036854775808,
  "small":1e-7,"big":1e21,"below":999999999999999999999,"tiny":5e-324,"maxf":1.7976931348623157e308,"neg0":-0.0,"frac":123.456,
  "s":"1","b":true,"z":null,"o":{"a":{"i":2,"f":2.5}},"l":[3,3.5,[4],{"i":5,"l":[6.0]}],"empty":{},"none":[],
  "esc":"<a href=\"x\">&amp;</a>\\ \/ \b\f\n\r\t \u0001\u001f\u007f \u2028\u2029 é € 😀 \ud83d \ufffd",
  "keys":{"b":1,"a":2,"B":3,"é":4,"a\"b":5,"\n":6,"":7,"aa":8,"\u2028":9}}`),
		"inf":   []byte(`{"a":1,"inf":1e400}`),
		"list":  []byte(`[1,"a",null,[],{}]`),
		"str":   []byte(`"just a string"`),
		"bad8":  []byte("{\"k\xff\":\"v\xfe\"}"),
		"deep":  []byte(strings.Repeat(`{"a":`, maxDepth-1) + "1" + strings.Repeat("}", maxDepth-1)),
		"deep2": []byte(strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)),
	}
	maps.Copy(bodies, payloads(t))
	exprs := []string{
		`body`,
		`[body]`,
		`{"wrapped": body, "again": [body]}`,
		`[body, body] + [1]`,
		`{"a": 1, "b": 2u, "c": 2.5, "d": 1e-7, "e": 1e21, "f": -0.0, "g": 1e300 * 10.0, "h": "<>&\u2028\u2029\x01\x7f\"\\",
		  "i": b"bytes\xff\x00", "j": timestamp("2026-01-02T03:04:05.123Z"), "k": duration("1.5s"), "l": null, "m": true, "n": false,
		  "o": [], "p": {}, "q": [[], [{}]], "B": 0, "é": -9223372036854775807 - 1, "a\"b": 18446744073709551615u}`,
		`{"nan": double("NaN")}`,
		`[double("-inf")]`,
		`{1: 2}`,
		`[optional.of(1)]`,
		`{"bad": [{true: 1}]}`,
		dropFields,
		`body.transformMap(k, v, v)`,
		`[[[[[[[[[[body]]]]]]]]]]`,
		`{"h": headers, "l": [headers, {}], "r": {"z": raw}}`,
	}
	for name, body := range bodies {
		for _, expr := range exprs {
			if _, err := parseJSON(body); err != nil {
				t.Fatalf("%s is not JSON", name)
			}
			tr := mustTransform(t, expr, "")
			hdr := http.Header{"X-B": {"2"}, "X-A": {"1 <&> \u2028"}, "Accept": {"*/*"}}
			v, _, err := tr.body.Eval(NewActivation(Input{Body: body, Headers: hdr}))
			if err != nil {
				continue // dropFields on a body without data, for one
			}
			what := name + ": " + expr
			out := sameJSON(t, what, v, 0)
			sameJSON(t, what, v, 1<<20)
			// Every limit around the result's size and around what the
			// budget counts of it (less: a null counts 1), where the
			// budget runs out in one order and not in another.
			w := jsonWriter{budget: maxResultBytes}
			w.value(v, 0)
			counted := maxResultBytes - w.budget
			for _, c := range []int{len(out), counted} {
				for max := max(1, c-24); max <= c+4; max++ {
					sameJSON(t, what, v, max)
				}
			}
			for _, max := range []int{1, 2, 3, 5, 10, 100} {
				sameJSON(t, what, v, max)
			}
		}
	}
}
