package jsonptr_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/hookgate/hookgate/internal/jsonptr"
)

func TestRemoveMember(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		doc, want string
		removed   bool
	}{
		{`{"signature":{"token":"t"},"event-data":{"id":"e"}}`, `{"event-data":{"id":"e"}}`, true},
		{`{"event-data":{"id":"e"},"signature":{"token":"t"}}`, `{"event-data":{"id":"e"}}`, true},
		{`{"a":1,"signature":{"x":[1,{"y":"}"}]},"b":2}`, `{"a":1,"b":2}`, true},
		{" {\n  \"a\": 1 ,\n  \"signature\" : {} ,\n  \"b\":\t2\n} \n", " {\n  \"a\": 1 ,\n  \"b\":\t2\n} \n", true},
		{`{"signature":1}`, `{}`, true},
		{`{ "signature":1 , "signature":2 }`, `{  }`, true},
		{`{"signature":1,"a":2,"signature":3}`, `{"a":2}`, true},
		{`{"sign\u0061ture":1,"a":2}`, `{"a":2}`, true},           // the name as decoded
		{`{"a":{"signature":1}}`, `{"a":{"signature":1}}`, false}, // top level only
		{`{"a":"signature"}`, `{"a":"signature"}`, false},         // a value, not a name
		{`[{"signature":1}]`, `[{"signature":1}]`, false},         // not an object
		{`{}`, `{}`, false},                                                           // nothing to remove
		{`{"signature":1,}`, `{"signature":1,}`, false},                               // not valid JSON
		{`{"signature":1} x`, `{"signature":1} x`, false},                             // data after the value
		{`{"signature":1`, `{"signature":1`, false},                                   // cut short
		{`"signature"`, `"signature"`, false},                                         // a string
		{``, ``, false},                                                               // nothing at all
		{`{"a":"\u00e9","signature":null}`, `{"a":"\u00e9"}`, true},                   // escapes kept as sent
		{`{"signature":[1,2,3],"n":1.50e+2}`, `{"n":1.50e+2}`, true},                  // numbers as written
		{`{"signatures":1,"signature2":2}`, `{"signatures":1,"signature2":2}`, false}, // other names
	} {
		got, removed := jsonptr.RemoveMember([]byte(tc.doc), "signature")
		if string(got) != tc.want || removed != tc.removed {
			t.Errorf("RemoveMember(%q) = %q, %t; want %q, %t", tc.doc, got, removed, tc.want, tc.removed)
		}
	}
	// The input is not modified.
	doc := []byte(`{"a":1,"signature":2,"b":3}`)
	if _, _ = jsonptr.RemoveMember(doc, "signature"); string(doc) != `{"a":1,"signature":2,"b":3}` {
		t.Errorf("the input became %q", doc)
	}
}

// What RemoveMember leaves is valid JSON that decodes to the document less
// the member, for any document encoding/json reads as an object without
// repeated names; anything else comes back as it was.
func FuzzRemoveMember(f *testing.F) {
	for _, s := range []string{
		`{"signature":{"token":"t"},"event-data":{"id":"e"}}`, ` { "a" : [1, {"signature": 2}], "signature": "x" } `,
		`{"signature":1}`, `[1]`, `{"a":1,}`, `{"\u0073ignature":true,"b":null}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		orig := bytes.Clone(doc)
		got, removed := jsonptr.RemoveMember(doc, "signature")
		if !bytes.Equal(doc, orig) {
			t.Fatalf("the input was modified")
		}
		var m map[string]any
		if json.Unmarshal(doc, &m) != nil || m == nil {
			if removed || !bytes.Equal(got, doc) {
				t.Fatalf("RemoveMember(%q) = %q, %t for a document that is no JSON object", doc, got, removed)
			}
			return
		}
		_, had := m["signature"]
		if removed != had {
			t.Fatalf("RemoveMember(%q): removed %t, the object has a signature member: %t", doc, removed, had)
		}
		var after map[string]any
		if err := json.Unmarshal(got, &after); err != nil {
			t.Fatalf("RemoveMember(%q) = %q: %v", doc, got, err)
		}
		delete(m, "signature")
		// Repeated names: encoding/json keeps the last; RemoveMember keeps
		// every other member, so only documents without them compare.
		if dec := json.NewDecoder(bytes.NewReader(doc)); !repeatsNames(dec) && !reflect.DeepEqual(m, after) {
			t.Fatalf("RemoveMember(%q) = %q: decodes to %v, want %v", doc, got, after, m)
		}
	})
}

// repeatsNames reports whether the top-level object dec reads has a
// member name twice (or cannot be read as tokens).
func repeatsNames(dec *json.Decoder) bool {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return true
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return true
		}
		name, _ := tok.(string)
		if seen[name] {
			return true
		}
		seen[name] = true
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return true
		}
	}
	return false
}
