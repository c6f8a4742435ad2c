package jsonptr_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hookgate/hookgate/internal/jsonptr"
)

func TestParsePointer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    jsonptr.Pointer
		wantErr bool
	}{
		{in: "", want: jsonptr.Pointer{}},
		{in: "/", want: jsonptr.Pointer{""}},
		{in: "/id", want: jsonptr.Pointer{"id"}},
		{in: "/data/object/id", want: jsonptr.Pointer{"data", "object", "id"}},
		{in: "/items/0", want: jsonptr.Pointer{"items", "0"}},
		{in: "//", want: jsonptr.Pointer{"", ""}},
		{in: "/a~1b", want: jsonptr.Pointer{"a/b"}},
		{in: "/m~0n", want: jsonptr.Pointer{"m~n"}},
		// RFC 6901 §4: ~1 is decoded before ~0, so "~01" is "~1", not "/".
		{in: "/~01", want: jsonptr.Pointer{"~1"}},
		{in: "/~10", want: jsonptr.Pointer{"/0"}},
		{in: "/~0~1~0", want: jsonptr.Pointer{"~/~"}},
		{in: "/a b/ü/%25", want: jsonptr.Pointer{"a b", "ü", "%25"}},
		{in: "id", wantErr: true},
		{in: "a/b", wantErr: true},
		{in: "#/id", wantErr: true},
		{in: "/a~2", wantErr: true},
		{in: "/a~", wantErr: true},
		{in: "/~", wantErr: true},
		{in: "/ok/~x", wantErr: true},
	} {
		got, err := jsonptr.ParsePointer(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParsePointer(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParsePointer(%q) error: %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParsePointer(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPointerString(t *testing.T) {
	t.Parallel()
	const doc = `{
		"id": "evt_1",
		"data": {"object": {"id": "in_1", "amount": 4200, "ratio": 1.5e3, "neg": -0.25}},
		"items": [{"id": "a"}, {"id": "b"}, "third"],
		"a/b": "slash", "m~n": "tilde", "~1": "tilde-one", "": "empty key",
		"big": 123456789012345678901234567890,
		"obj": {}, "arr": [], "t": true, "f": false, "nil": null,
		"unicode": "h\u00e9llo", "escaped": "a\"b\\c"
	}`
	type want struct {
		val string
		err error // nil, ErrNotFound, ErrNotString, or errDecode for any other error
	}
	errDecode := errors.New("decoding error")
	for _, tc := range []struct {
		ptr, doc string
		want
	}{
		{"/id", doc, want{val: "evt_1"}},
		{"/data/object/id", doc, want{val: "in_1"}},
		{"/items/0/id", doc, want{val: "a"}},
		{"/items/1/id", doc, want{val: "b"}},
		{"/items/2", doc, want{val: "third"}},
		{"/a~1b", doc, want{val: "slash"}},
		{"/m~0n", doc, want{val: "tilde"}},
		{"/~01", doc, want{val: "tilde-one"}},
		{"/", doc, want{val: "empty key"}},
		{"/unicode", doc, want{val: "héllo"}},
		{"/escaped", doc, want{val: `a"b\c`}},
		// Numbers are returned as their literal text, never reformatted.
		{"/data/object/amount", doc, want{val: "4200"}},
		{"/data/object/ratio", doc, want{val: "1.5e3"}},
		{"/data/object/neg", doc, want{val: "-0.25"}},
		{"/big", doc, want{val: "123456789012345678901234567890"}},
		{"", `"whole"`, want{val: "whole"}},
		{"", `42`, want{val: "42"}},
		// Missing.
		{"/nope", doc, want{err: jsonptr.ErrNotFound}},
		{"/data/nope/id", doc, want{err: jsonptr.ErrNotFound}},
		{"/items/3", doc, want{err: jsonptr.ErrNotFound}},
		{"/items/-1", doc, want{err: jsonptr.ErrNotFound}},
		{"/items/-", doc, want{err: jsonptr.ErrNotFound}},
		{"/items/x", doc, want{err: jsonptr.ErrNotFound}},
		{"/items/01", doc, want{err: jsonptr.ErrNotFound}}, // leading zero: not an array index
		{"/items/00", doc, want{err: jsonptr.ErrNotFound}},
		{"/items/ 1", doc, want{err: jsonptr.ErrNotFound}},
		{"/items/1.0", doc, want{err: jsonptr.ErrNotFound}},
		{"/id/0", doc, want{err: jsonptr.ErrNotFound}}, // into a string
		{"/data/object/amount/x", doc, want{err: jsonptr.ErrNotFound}},
		{"/nil/x", doc, want{err: jsonptr.ErrNotFound}},
		{"/ID", doc, want{err: jsonptr.ErrNotFound}}, // member names are case-sensitive
		// Not a string or number.
		{"/data", doc, want{err: jsonptr.ErrNotString}},
		{"/items", doc, want{err: jsonptr.ErrNotString}},
		{"/obj", doc, want{err: jsonptr.ErrNotString}},
		{"/arr", doc, want{err: jsonptr.ErrNotString}},
		{"/t", doc, want{err: jsonptr.ErrNotString}},
		{"/f", doc, want{err: jsonptr.ErrNotString}},
		{"/nil", doc, want{err: jsonptr.ErrNotString}},
		{"", doc, want{err: jsonptr.ErrNotString}},
		// Not JSON.
		{"/id", ``, want{err: errDecode}},
		{"/id", `id=evt_1&type=x`, want{err: errDecode}},
		{"/id", `<event><id>1</id></event>`, want{err: errDecode}},
		{"/id", `{"id": "evt_1"`, want{err: errDecode}},
		{"/id", "\x00\xff", want{err: errDecode}},
	} {
		p, err := jsonptr.ParsePointer(tc.ptr)
		if err != nil {
			t.Fatalf("ParsePointer(%q): %v", tc.ptr, err)
		}
		got, err := p.String([]byte(tc.doc))
		name := tc.ptr
		if tc.doc != doc {
			name += " in " + tc.doc
		}
		switch {
		case tc.err == nil:
			if err != nil || got != tc.val {
				t.Errorf("%s: String = %q, %v; want %q, nil", name, got, err, tc.val)
			}
		case errors.Is(tc.err, errDecode):
			if err == nil || errors.Is(err, jsonptr.ErrNotFound) || errors.Is(err, jsonptr.ErrNotString) {
				t.Errorf("%s: String = %q, %v; want a decoding error", name, got, err)
			}
		default:
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: String = %q, %v; want %v", name, got, err, tc.err)
			}
		}
		if err != nil && got != "" {
			t.Errorf("%s: String returned %q with its error", name, got)
		}
	}
}

// escapeToken escapes a member name as a JSON pointer reference token.
func escapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// FuzzPointerString checks that ParsePointer and String never panic, and that
// a string value stored under any member name (nested in an object and an
// array) is found again through the escaped pointer to it.
func FuzzPointerString(f *testing.F) {
	for _, s := range []struct{ key, val, ptr, doc string }{
		{"id", "evt_1", "/id", `{"id":"evt_1"}`},
		{"a/b", "x", "/a~1b", `{"a/b":"x"}`},
		{"m~n", "y", "/m~0n", `{"m~n":"y"}`},
		{"~01", "z", "/~001", `{"~01":"z"}`},
		{"", "", "/", `{"":""}`},
		{"ü", "héllo\n", "/0", `["a"]`},
		{"<&>", `"quoted"`, "/items/01", `{"items":[1,2]}`},
		{"0", "1", "/a~2", `{"a":`},
		{"k", "v", "", `12345678901234567890`},
		{"k", "v", "/x/y/z", "\x00\xff"},
	} {
		f.Add(s.key, s.val, s.ptr, []byte(s.doc))
	}
	f.Fuzz(func(t *testing.T, key, val, rawPtr string, rawDoc []byte) {
		// Arbitrary input: no panic, and String's contract on errors.
		if p, err := jsonptr.ParsePointer(rawPtr); err == nil {
			got, err := p.String(rawDoc)
			if err != nil && got != "" {
				t.Errorf("String(%q) returned %q with error %v", rawDoc, got, err)
			}
		} else if strings.HasPrefix(rawPtr, "/") && !strings.Contains(rawPtr, "~") {
			t.Errorf("ParsePointer(%q) rejected a pointer without ~: %v", rawPtr, err)
		}

		// Round trip: JSON encoding replaces invalid UTF-8, so only valid
		// strings are expected back unchanged.
		if !utf8.ValidString(key) || !utf8.ValidString(val) {
			return
		}
		doc, err := json.Marshal(map[string]any{
			"top":    map[string]string{key: val},
			"nested": []any{0, map[string]string{key: val}},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, ptr := range []string{"/top/" + escapeToken(key), "/nested/1/" + escapeToken(key)} {
			p, err := jsonptr.ParsePointer(ptr)
			if err != nil {
				t.Fatalf("ParsePointer(%q) of an escaped key: %v", ptr, err)
			}
			got, err := p.String(doc)
			if err != nil || got != val {
				t.Fatalf("String(%q) in %s = %q, %v; want %q", ptr, doc, got, err, val)
			}
		}
	})
}
