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
