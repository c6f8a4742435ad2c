package jsonptr_test

import (
	"errors"
	"testing"

	"github.com/hookgate/hookgate/internal/jsonptr"
)

// Was a bug: pointer.go String accepts array indexes that RFC 6901 does not
// ("0" or [1-9][0-9]*): strconv.Atoi takes a sign, and only a leading '0' is
// refused, so "/items/+1" and "/items/-0" resolve.
func TestPointerRejectsSignedArrayIndex(t *testing.T) {
	t.Parallel()
	doc := []byte(`{"items": ["a", "b"]}`)
	for _, ptr := range []string{"/items/+1", "/items/-0", "/items/+0"} {
		p, err := jsonptr.ParsePointer(ptr)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := p.String(doc); !errors.Is(err, jsonptr.ErrNotFound) {
			t.Errorf("String(%s) = %q, %v; want ErrNotFound", ptr, got, err)
		}
	}
}

// Was a bug: pointer.go String decodes only the first JSON value of doc, so a body
// that is not JSON (a JSON value followed by anything) is accepted: the
// handler takes its delivery ID instead of answering 400 "not valid JSON".
func TestPointerRejectsTrailingData(t *testing.T) {
	t.Parallel()
	p, err := jsonptr.ParsePointer("/id")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{`{"id":"a"} trailing`, `{"id":"a"}{"id":"b"}`, `{"id":"a"}]`} {
		if got, err := p.String([]byte(doc)); err == nil {
			t.Errorf("String(%q) = %q, nil; want a decoding error", doc, got)
		}
	}
}
