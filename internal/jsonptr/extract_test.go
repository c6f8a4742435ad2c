package jsonptr_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/jsonptr"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// decodeString is the former Pointer.String: the whole body decoded into
// any with encoding/json, then walked. It is the reference Extract is
// checked against.
func decodeString(p jsonptr.Pointer, doc []byte) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("the body has data after its JSON value")
	}
	for _, tok := range p {
		switch c := v.(type) {
		case map[string]any:
			next, ok := c[tok]
			if !ok {
				return "", jsonptr.ErrNotFound
			}
			v = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || (tok != "0" && (tok[0] == '0' || tok[0] == '+' || tok[0] == '-')) || i >= len(c) {
				return "", jsonptr.ErrNotFound
			}
			v = c[i]
		default:
			return "", jsonptr.ErrNotFound
		}
	}
	switch s := v.(type) {
	case string:
		return s, nil
	case json.Number:
		return s.String(), nil
	default:
		return "", jsonptr.ErrNotString
	}
}

// class names the outcome of a String call for comparison.
func class(val string, err error) string {
	switch {
	case err == nil:
		return "value " + strconv.Quote(val)
	case errors.Is(err, jsonptr.ErrNotFound):
		return "not found"
	case errors.Is(err, jsonptr.ErrNotString):
		return "not a string"
	default:
		return "not JSON"
	}
}

func mustPointers(t testing.TB, ss ...string) []jsonptr.Pointer {
	t.Helper()
	out := make([]jsonptr.Pointer, len(ss))
	for i, s := range ss {
		p, err := jsonptr.ParsePointer(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = p
	}
	return out
}

// Several pointers are resolved in one pass, each to its kind and text.
func TestExtractSeveralPointers(t *testing.T) {
	t.Parallel()
	doc := []byte(`{"id":"evt_1","type":"invoice.paid","data":{"object":{"amount":4200,"tags":["a","b"],"ok":true,"n":null}},
		"dup":{"x":"first"},"dup":{"y":"second"},"esc\u0061ped":"yes"}`)
	ptrs := mustPointers(t, "/id", "/type", "/data/object/amount", "/data/object/tags/1", "/data/object/ok", "/data/object/n",
		"/data/object", "/data/object/tags", "/missing", "/dup/x", "/dup/y", "/escaped", "/id/0")
	vals, err := jsonptr.Extract(doc, ptrs)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		found bool
		kind  jsonptr.Kind
		str   string
		raw   string
	}{
		{true, jsonptr.KindString, "evt_1", `"evt_1"`},
		{true, jsonptr.KindString, "invoice.paid", `"invoice.paid"`},
		{true, jsonptr.KindNumber, "4200", `4200`},
		{true, jsonptr.KindString, "b", `"b"`},
		{true, jsonptr.KindBool, "true", `true`},
		{true, jsonptr.KindNull, "", `null`},
		{true, jsonptr.KindObject, "", `{"amount":4200,"tags":["a","b"],"ok":true,"n":null}`},
		{true, jsonptr.KindArray, "", `["a","b"]`},
		{false, jsonptr.KindNone, "", ""},
		{false, jsonptr.KindNone, "", ""}, // the last "dup" counts
		{true, jsonptr.KindString, "second", `"second"`},
		{true, jsonptr.KindString, "yes", `"yes"`},
		{false, jsonptr.KindNone, "", ""},
	}
	for i, w := range want {
		v := vals[i]
		if v.Found != w.found || v.Kind != w.kind || v.Str != w.str || string(v.Raw) != w.raw {
			t.Errorf("%v: got {%v %v %q %s}, want %+v", ptrs[i], v.Found, v.Kind, v.Str, v.Raw, w)
		}
	}
	if _, err := jsonptr.Extract(doc, make([]jsonptr.Pointer, jsonptr.MaxExtractPointers+1)); err == nil {
		t.Error("more than MaxExtractPointers pointers: no error")
	}
}

// Extract agrees with decoding the whole body with encoding/json on
// documents of every kind, valid or not.
func TestExtractMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	docs := []string{
		`{"id":"x"}`, ` {"id" : 1.5e-3 } `, `{"id":-0}`, `{"id":01}`, `{"id":1.}`, `{"id":.5}`, `{"id":1e}`, `{"id":+1}`,
		`{"id":"a\u00e9\ud83d\ude00\ud83d"}`, `{"id":"\ud800\u0041"}`, "{\"id\":\"\xff\xfe\"}", "{\"\xff\":\"k\"}",
		`{"id":"tab	in"}`, `{"id":"\x"}`, `{"id":"\u12"}`, `{"id":tru}`, `{"id":true}`, `{"id":nul}`, `[1,2,]`, `{"a":1,}`,
		`{"a" 1}`, `{a:1}`, `{"id":"x"} x`, `{"id":"x"}{"id":"y"}`, `"x" "y"`, ``, ` `, `[`, `{"id":[1,{"a":[{}]}]}`,
		`{"id":{"id":"inner"},"id":"outer"}`, `{"id":"outer","id":{"id":"inner"}}`, "\ufeff{\"id\":\"bom\"}",
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		`{"id":"x"}` + "\n\t\r ",
	}
	ptrs := []string{"", "/id", "/id/id", "/id/0", "/id/1/a/0", "/a", "/\ufffd", "/0", "/0/0"}
	for _, doc := range docs {
		for _, ps := range ptrs {
			p := mustPointers(t, ps)[0]
			gotV, gotErr := p.String([]byte(doc))
			wantV, wantErr := decodeString(p, []byte(doc))
			if got, want := class(gotV, gotErr), class(wantV, wantErr); got != want {
				t.Errorf("%q in %.60q: Extract says %s, encoding/json %s", ps, doc, got, want)
			}
		}
	}
}

func FuzzExtractMatchesEncodingJSON(f *testing.F) {
	for _, s := range []struct{ ptr, doc string }{
		{"/id", `{"id":"evt_1"}`}, {"/a/0", `{"a":[1,2]}`}, {"/a/b", `{"a":{"b":"x"},"a":1}`},
		{"", `12345678901234567890`}, {"/x", "\x00\xff"}, {"/id", `{"id":"\ud83d"}`},
	} {
		f.Add(s.ptr, []byte(s.doc))
	}
	f.Fuzz(func(t *testing.T, rawPtr string, doc []byte) {
		p, err := jsonptr.ParsePointer(rawPtr)
		if err != nil {
			return
		}
		gotV, gotErr := p.String(doc)
		wantV, wantErr := decodeString(p, doc)
		if got, want := class(gotV, gotErr), class(wantV, wantErr); got != want {
			t.Errorf("%q in %q: Extract says %s, encoding/json %s", rawPtr, doc, got, want)
		}
	})
}

// heapPerCall returns the bytes allocated by one call of f and the
// allocations per call (runtime.MemStats, as testing.AllocsPerRun counts
// them): the least, over three rounds of two calls each, with GOMAXPROCS at
// 1 (as testing.AllocsPerRun runs), so that what another goroutine of the
// process allocates meanwhile in one round does not count (CI once saw 36
// allocations in a round where a call of Extract makes a handful). f
// allocates the same on every call.
func heapPerCall(f func()) (bytes uint64, allocs float64) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const runs, rounds = 2, 3
	f() // warm up
	bytes, allocs = math.MaxUint64, math.Inf(1)
	for range rounds {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			f()
		}
		runtime.ReadMemStats(&after)
		bytes = min(bytes, (after.TotalAlloc-before.TotalAlloc)/runs)
		allocs = min(allocs, float64(after.Mallocs-before.Mallocs)/runs)
	}
	return bytes, allocs
}

// Memory per call is bounded by what is asked for, not by the document's
// shape: 1 MiB array and object bombs and deep nesting cost a few
// allocations (the result, the error), where decoding into any cost tens of
// MB. Not parallel: the parallel tests wait while this one measures the
// process's allocations, alone.
func TestExtractMemoryIsBounded(t *testing.T) {
	testkit.Slow(t, "scans 1 MiB bombs dozens of times (about 20 s under -race)")
	const size = 1 << 20
	var obj strings.Builder
	obj.WriteString(`{"id":"evt_1"`)
	for i := 0; obj.Len() < size; i++ {
		obj.WriteString(`,"k` + strconv.Itoa(i) + `":0`)
	}
	obj.WriteString("}")
	deep := strings.Repeat(`{"a":`, jsonptr.MaxJSONDepth-1) + `"x"` + strings.Repeat("}", jsonptr.MaxJSONDepth-1)
	for _, tc := range []struct {
		name string
		doc  string
		ptr  string
	}{
		{"array of zeros", "[" + strings.Repeat("0,", size/2) + "0]", "/0"},
		{"array of empty arrays", "[" + strings.Repeat("[],", size/3) + "[]]", "/1"},
		{"array of empty objects", "[" + strings.Repeat("{},", size/3) + "{}]", "/5"},
		{"object of many members", obj.String(), "/id"},
		{"deep nesting", deep, "/a/a/a"},
		{"too deep nesting", strings.Repeat("[", size/2) + strings.Repeat("]", size/2), "/0"},
		{"long string not asked for", `{"big":"` + strings.Repeat("x", size) + `","id":"evt_1"}`, "/nope"},
	} {
		doc := []byte(tc.doc)
		ptrs := mustPointers(t, tc.ptr, "/id", "/data/object/id")
		// The result (3 Values), a found string, an error: well under 4 KiB
		// and a handful of allocations, whatever the 1 MiB document holds;
		// the same for Pointer.String on top of it.
		bytes, allocs := heapPerCall(func() { _, _ = jsonptr.Extract(doc, ptrs) })
		if bytes > 4<<10 || allocs > 16 {
			t.Errorf("%s (%d bytes): Extract allocates %d bytes in %.0f allocations per call", tc.name, len(doc), bytes, allocs)
		}
		bytes, allocs = heapPerCall(func() { _, _ = ptrs[0].String(doc) })
		if bytes > 4<<10 || allocs > 16 {
			t.Errorf("%s (%d bytes): Pointer.String allocates %d bytes in %.0f allocations per call", tc.name, len(doc), bytes, allocs)
		}
	}
	// A value asked for costs its own size, once.
	doc := []byte(`{"id":"` + strings.Repeat("x", size) + `"}`)
	ptrs := mustPointers(t, "/id")
	if bytes, _ := heapPerCall(func() { _, _ = jsonptr.Extract(doc, ptrs) }); bytes > size+size/8 {
		t.Errorf("a 1 MiB string asked for: Extract allocates %d bytes per call, want about 1 MiB", bytes)
	}
}
