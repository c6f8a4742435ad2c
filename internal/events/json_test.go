package events

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestAppendHeadersJSONDecodesLikeEncodingJSON: whatever the header names
// and values (quotes, backslashes, control characters, invalid UTF-8), the
// hand-written encoding decodes to what encoding/json's encoding decodes to.
func TestAppendHeadersJSONDecodesLikeEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, h := range []map[string][]string{
		{},
		{"Content-Type": {"application/json"}},
		{"X-A": {"a", "b"}, "X-Empty": {}, "X-Blank": {""}},
		{"X-Q": {`say "hi" \ there`}, "X-Ctl": {"a\x00b\x1fc\td\r\ne\x7f"}},
		{"X-Bad-Utf8": {"ok\xff\xfeend", "\xc3"}, "X-\xffName": {"v"}},
		{"X-Unicode": {"héllo ☃ 𝄞", "<script>&"}},
	} {
		got := appendHeadersJSON(nil, h)
		if !json.Valid(got) {
			t.Fatalf("%q: invalid JSON %s", h, got)
		}
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var a, b map[string][]string
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(want, &b); err != nil {
			t.Fatal(err)
		}
		for k, v := range b { // encoding/json keeps an empty array; so must we
			if v == nil {
				b[k] = []string{}
			}
		}
		for k, v := range a {
			if v == nil {
				a[k] = []string{}
			}
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%q:\n got %s\nwant %s", h, got, want)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("plain")
	f.Add("\x00\"\\\xff")
	f.Fuzz(func(t *testing.T, s string) {
		got := appendJSONString(nil, s)
		want, _ := json.Marshal(s)
		var a, b string
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("%q: %s is not JSON: %v", s, got, err)
		}
		_ = json.Unmarshal(want, &b)
		if a != b {
			t.Fatalf("%q: decodes to %q, encoding/json's to %q", s, a, b)
		}
	})
}
