package rules

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// stdParseJSON is the parse parseJSON replaced, on encoding/json: the
// reference parseJSON must agree with, on what it accepts and on what it
// makes of it.
func stdParseJSON(b []byte) (any, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errNotJSON
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, errNotJSON
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errNotJSON
	}
	return stdNumbers(v), nil
}

func stdNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = stdNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = stdNumbers(e)
		}
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				return n
			}
		}
		f, _ := strconv.ParseFloat(s, 64)
		return f
	}
	return v
}

// sameParse fails t unless parseJSON and stdParseJSON agree on b.
func sameParse(t testing.TB, b []byte) {
	got, gerr := parseJSON(b)
	want, werr := stdParseJSON(b)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("parseJSON(%q): error %v, encoding/json's %v", b, gerr, werr)
	}
	if gerr == nil && !sameJSONValue(got, want) {
		t.Fatalf("parseJSON(%q) =\n%#v\nencoding/json:\n%#v", b, got, want)
	}
}

// sameJSONValue is reflect.DeepEqual but NaN-free floats compare by
// bits, so that -0 and 0 differ.
func sameJSONValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, e := range x {
			f, ok := y[k]
			if !ok || !sameJSONValue(e, f) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for i := range x {
			if !sameJSONValue(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

var parseCases = []string{
	``, ` `, "\t\n\r ", "\v", "\xef\xbb\xbf{}", `{}`, `[]`, ` {} `, `{}x`, `{} {}`, `{}{}`, `[] 1`, `1 2`,
	`0`, `-0`, `-0.0`, `-`, `01`, `-01`, `1.`, `.5`, `1e`, `1e+`, `1E-2`, `1e+2`, `+1`, `1.5e3`, `0e0`, `-0e-0`,
	`123456789012345678`, `-123456789012345678`, `1234567890123456789`, `-1234567890123456789`,
	`9223372036854775807`, `-9223372036854775808`, `9223372036854775808`, `-9223372036854775809`,
	`99999999999999999999999`, `1e400`, `-1e400`, `1e-400`, `0.1`, `2.5E+10`, `1.7976931348623157e308`,
	`true`, `false`, `null`, `tru`, `nul`, `True`, `nulll`, `[true,false,null]`,
	`""`, `"a"`, `"\""`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\'"`, `"\x"`, `"\u0041"`, `"\u00e9"`, `"\u00E9"`, `"\u12"`, `"\u12G4"`,
	`"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`, `"\ude00"`, `"\ud83d\u0041"`, `"\ud83d\ud83d\ude00"`, `"\ud83d\u12"`, `"\ud83d\uzzzz"`,
	"\"a\x00b\"", "\"a\x1fb\"", "\"a\tb\"", "\"a\x7fb\"", "\"Friedrichstraße\"", "\"\xff\"", "\"a\xc3\"", "\"\xed\xa0\x80\"", "\"\xef\xbf\xbd\"",
	"\"\xff\\n\"", "\"\\n\xff\"", `"abc`, `"abc\`, `"abc\"`,
	`{"a":1}`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`, `{"a":1,"a":2}`, `{"a":{"a":[1,{"b":null}]}}`,
	`[1,]`, `[,1]`, `[1 2]`, `[`, `]`, `{`, `}`, `[[[]]]`, `[[[]]`, ` [ 1 , 2 ] `, "{\n\"a\"\t:\r1\n}",
	`{"i":1,"n":-7,"f":1.0,"e":1e3,"E":2E-1,"s":"1","b":true,"z":null,"l":[3,3.5,[4],{"i":5,"l":[6.0]}]}`,
	`{"\u0061":1,"a\u0000":2}`, `"\u0000"`, `"\u2028\u2029"`,
}

func TestParseJSONAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, c := range parseCases {
		sameParse(t, []byte(c))
	}
	// Nesting up to encoding/json's limit, and one past it.
	for _, n := range []int{maxNesting - 1, maxNesting, maxNesting + 1} {
		sameParse(t, []byte(strings.Repeat("[", n)+strings.Repeat("]", n)))
		sameParse(t, []byte(strings.Repeat(`{"a":`, n)+"1"+strings.Repeat("}", n)))
	}
	// Every payload of the tests, whole and cut short at every byte.
	for _, b := range payloads(t) {
		sameParse(t, b)
		for i := range b {
			sameParse(t, b[:i])
		}
	}
}

func FuzzParseJSON(f *testing.F) {
	for _, c := range parseCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameParse(t, b) })
}

// payloads are the test payloads, by file name.
func payloads(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string][]byte, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}
