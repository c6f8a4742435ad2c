package sender_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/rules"
)

// matchAsFilter reads the docs' table of each match condition (and
// event_types) with its filter equivalent: pairs of the YAML and the CEL.
func matchAsFilter(t *testing.T) [][2]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "forwarding.md"))
	if err != nil {
		t.Fatal(err)
	}
	const head = "| `match` or `event_types` | `filter` |\n|---|---|\n"
	text := string(b)
	i := strings.Index(text, head)
	if i < 0 {
		t.Fatal("docs/forwarding.md has no table of match conditions as filters")
	}
	var rows [][2]string
	for _, line := range strings.Split(text[i+len(head):], "\n") {
		if !strings.HasPrefix(line, "| `") {
			break
		}
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), " | ")
		if len(cells) != 2 {
			t.Fatalf("row %q: want two cells", line)
		}
		unquote := func(c string) string {
			c = strings.Trim(strings.TrimSpace(c), "|")
			c = strings.TrimSpace(c)
			return strings.ReplaceAll(strings.Trim(c, "`"), "\x00", "|")
		}
		rows = append(rows, [2]string{unquote(cells[0]), unquote(cells[1])})
	}
	return rows
}

// matchCorpus are requests of every shape the table's rows read, where
// match and CEL agree by design. The docs name the three cases where they
// do not (a repeated header, a number written as a string or as 1000.0,
// and an error counted), which are not here.
var matchCorpus = struct {
	headers    []http.Header
	eventTypes []string
	bodies     []string
}{
	headers:    []http.Header{{}, {"X-Shop-Domain": {"a.example.com"}}, {"X-Shop-Domain": {"b.example.com"}}, {"X-Shop-Domain": {"c.example.com"}}},
	eventTypes: []string{"", "invoice.paid", "invoice", "invoices.x", "customer.created", "customer.updated"},
	bodies: []string{
		`{"data":{"object":{"currency":"usd","amount":1000}},"livemode":true,"deleted_at":null,"items":[{"sku":"A1"}]}`,
		`{"data":{"object":{"currency":"eur","amount":999}},"livemode":false,"deleted_at":"2026-01-01","items":[{"sku":"B2"},{"sku":"A1"}]}`,
		`{"data":{"object":{"currency":"gbp","amount":1000.5}},"items":[]}`,
		`{"data":{"object":{"currency":{"a":1},"amount":[1000]}},"livemode":"yes","deleted_at":0}`,
		`{"data":{"object":"usd"},"items":[{"sku":["A1"]}]}`,
		`{"data":"x","livemode":null}`,
		`{"data":[1,2],"items":"A1"}`,
		`{"items":[{"sku":"A1"}],"deleted_at":null}`,
		`[1,2]`,
		`"usd"`,
		`not json`,
		``,
	},
}

// Each match condition of the docs and its filter equivalent decide the
// same, on every request of the corpus. A filter's error drops the
// forward, as a match that does not hold.
func TestMatchAndItsFilterAgree(t *testing.T) {
	t.Parallel()
	rows := matchAsFilter(t)
	if len(rows) < 6 {
		t.Fatalf("the docs' table has %d rows", len(rows))
	}
	for _, row := range rows {
		route := "match: [" + row[0] + "]"
		if strings.HasPrefix(row[0], "event_types:") {
			route = row[0]
		}
		yaml := "senders:\n" + senderYAML("s", "delivery_id: { header: X-Id }", "event_type: { header: X-Event-Type }",
			"forward:",
			"  - name: m",
			"    url: http://m.test/",
			"    "+route,
			"  - name: f",
			"    url: http://f.test/",
			"    filter: '"+strings.ReplaceAll(row[1], "'", "''")+"'")
		s, _ := mustParse(t, yaml, noEnv).Get("s")
		f, _ := s.Target("f")
		holds := 0
		for _, h := range matchCorpus.headers {
			for _, et := range matchCorpus.eventTypes {
				for _, body := range matchCorpus.bodies {
					h := h.Clone()
					h.Set("X-Event-Type", et)
					in := s.Inspect([]byte(body))
					byMatch := slices.Contains(s.Route(s.EventTypeOf(h, &in), h, &in), "m")
					a := rules.NewActivation(rules.Input{EventType: s.EventTypeOf(h, &in), Headers: h, Body: []byte(body)})
					byFilter, err := f.Filter.Eval(a)
					if byMatch != byFilter {
						t.Errorf("%s vs %s: match %v, filter %v (%v) on headers %v, body %s", row[0], row[1], byMatch, byFilter, err, h, body)
					}
					if byMatch {
						holds++
					}
				}
			}
		}
		if holds == 0 {
			t.Errorf("%s: holds for no request of the corpus", row[0])
		}
		t.Logf("%s: holds for %d requests", row[0], holds)
	}
}
