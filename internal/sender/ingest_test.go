package sender_test

import (
	"strings"
	"testing"
)

func TestParseIngestHardeningFields(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "senders:\n"+senderYAML("a", "delivery_id: { header: X-Id }", "accept_encodings: [gzip]", "store_headers: [X-Id, X-Api-Key]")+
		senderYAML("b", "delivery_id: { header: X-Id }", "drop_headers: [User-Agent]"), noEnv)
	if a := c.Senders[0]; !a.AcceptsEncoding("gzip") || a.AcceptsEncoding("br") {
		t.Errorf("a accepts gzip %v, br %v; want true, false", a.AcceptsEncoding("gzip"), a.AcceptsEncoding("br"))
	}
	if b := c.Senders[1]; b.AcceptsEncoding("gzip") {
		t.Error("a sender without accept_encodings accepts gzip")
	}
	for _, tc := range []struct{ extra, want string }{
		{"accept_encodings: [br]", "senders[0].accept_encodings[0]: must be one of: gzip"},
		{"accept_encodings: [identity]", "senders[0].accept_encodings[0]: must be one of: gzip"},
		{"accept_encodings: [gzip, gzip]", "senders[0].accept_encodings"},
		{"store_headers: [Authorization]", "senders[0].store_headers[0]: Authorization is never stored"},
		{"store_headers: [cookie]", "senders[0].store_headers[0]: cookie is never stored"},
		{"store_headers: [\"bad name\"]", "senders[0].store_headers[0]: must be an HTTP header name"},
		{"store_headers: [X-A]\n    drop_headers: [X-B]", "senders[0].store_headers: cannot be set together with drop_headers"},
	} {
		_, err := parse([]byte("senders:\n"+senderYAML("a", "delivery_id: { header: X-Id }", tc.extra)), noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.extra, err, tc.want)
		}
	}
}
