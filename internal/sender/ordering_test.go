package sender_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/config"
)

// Prepare reads each ordered target's key: at a JSON pointer (a string or
// the text of a number), in a header sent once, or a constant. A forward
// without its key, or to an unordered target, has "". A key longer than
// config.MaxOrderKey is kept as its hash. The stored event gives the same
// key again for a redelivery (Ordering.KeyOf).
func TestPrepareOrderKeys(t *testing.T) {
	t.Parallel()
	s := compileWithFilters(t, "senders:\n"+senderYAML("s",
		"delivery_id: { header: X-Id }",
		"forward:",
		"  - { name: byid, url: 'https://example.com/a', ordering: { json_pointer: /data/object/id } }",
		"  - { name: byheader, url: 'https://example.com/b', ordering: { header: X-Product-Id, on_failure: skip } }",
		"  - { name: all, url: 'https://example.com/c', ordering: { constant: all } }",
		"  - { name: plain, url: 'https://example.com/d' }",
	), nil)
	prepare := func(body string, h map[string][]string) []string {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/webhooks/s", nil)
		r.Header.Set("X-Id", "d1")
		for k, vs := range h {
			for _, v := range vs {
				r.Header.Add(k, v)
			}
		}
		p, err := s.Prepare(r, []byte(body), nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Targets, []string{"byid", "byheader", "all", "plain"}) {
			t.Fatalf("targets %q", p.Targets)
		}
		// The stored event gives the same keys.
		for i, name := range p.Targets {
			tg, _ := s.Target(name)
			want := ""
			if p.OrderKeys != nil {
				want = p.OrderKeys[i]
			}
			if got := tg.Ordering.KeyOf(r.Header, []byte(body)); got != want {
				t.Errorf("%s: KeyOf the stored event %q, Prepare %q", name, got, want)
			}
		}
		return p.OrderKeys
	}
	if got := prepare(`{"data":{"object":{"id":"ch_1"}}}`, map[string][]string{"X-Product-Id": {"p-9"}}); !slices.Equal(got, []string{"ch_1", "p-9", "all", ""}) {
		t.Errorf("keys %q, want ch_1, p-9, all and none", got)
	}
	if got := prepare(`{"data":{"object":{"id":42}}}`, nil); !slices.Equal(got, []string{"42", "", "all", ""}) {
		t.Errorf("a number, no header: keys %q, want 42, none, all, none", got)
	}
	if got := prepare(`{"data":{"object":{"id":{"x":1}}}}`, map[string][]string{"X-Product-Id": {"a", "b"}}); !slices.Equal(got, []string{"", "", "all", ""}) {
		t.Errorf("an object, a header twice: keys %q, want only the constant", got)
	}
	long := strings.Repeat("k", config.MaxOrderKey+1)
	got := prepare(`{"data":{"object":{"id":"`+long+`"}}}`, nil)
	if !strings.HasPrefix(got[0], "sha256:") || len(got[0]) != len("sha256:")+64 {
		t.Errorf("a key of %d bytes: %q, want its hash", len(long), got[0])
	}
}

// An ordering names exactly one of header, json_pointer and constant, and
// on_failure is hold (the default) or skip.
func TestParseOrdering(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ ordering, want string }{
		{"{ json_pointer: /id }", ""},
		{"{ header: X-Key, on_failure: skip }", ""},
		{"{ constant: all, on_failure: hold }", ""},
		{"{}", "exactly one of header, json_pointer or constant"},
		{"{ header: X-Key, json_pointer: /id }", "exactly one of header, json_pointer or constant"},
		{"{ json_pointer: /id, on_failure: retry }", "on_failure"},
		{"{ json_pointer: 'no slash' }", "json_pointer"},
	} {
		yaml := "senders:\n" + senderYAML("s", "delivery_id: { header: X-Id }", "forward:",
			"  - { name: t, url: 'https://example.com/a', ordering: "+tc.ordering+" }")
		c, err := config.Parse([]byte(yaml), noEnv)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("ordering %s: %v", tc.ordering, err)
		case tc.want == "" && c.Senders[0].Forward[0].Ordering.OnFailure == "":
			t.Errorf("ordering %s: on_failure not defaulted", tc.ordering)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("ordering %s: error %v, want one mentioning %q", tc.ordering, err, tc.want)
		}
	}
}

// An ordering header must be one the sender stores: a redelivery reads the
// key from the stored event.
func TestParseOrderingHeaderStored(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ headers, want string }{
		{"", ""},
		{"store_headers: [X-Key, Content-Type]", ""},
		{"store_headers: [Content-Type]", "is not stored"},
		{"drop_headers: [x-key]", "is not stored"},
	} {
		lines := []string{"delivery_id: { header: X-Id }"}
		if tc.headers != "" {
			lines = append(lines, tc.headers)
		}
		lines = append(lines, "forward:", "  - { name: t, url: 'https://example.com/a', ordering: { header: X-Key } }")
		_, err := config.Parse([]byte("senders:\n"+senderYAML("s", lines...)), noEnv)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.headers, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one mentioning %q", tc.headers, err, tc.want)
		}
	}
}
