package jsonstr

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Append writes the bytes encoding/json writes without HTML escaping:
// control bytes, quotes, backslashes, invalid UTF-8, U+2028 and U+2029.
func FuzzAppend(f *testing.F) {
	for _, s := range []string{"plain", "\x00\"\\\xff", "\b\f\n\r\t\x1f", "a\u2028b\u2029c", "<&>", "Grüße 日本 🙂", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := Append([]byte("x"), s); string(got) != "x"+string(bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Fatalf("%q: got %s, want x%s", s, got, want.Bytes())
		}
	})
}
