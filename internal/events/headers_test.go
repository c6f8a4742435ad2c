package events_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/events"
)

// A header named for a MAC (a hyphen- or underscore-separated part "mac"
// or "sig") is credential-like, as are the words of before; a name that
// merely contains the letters is not.
func TestCredentialLikeNames(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"X-Airtable-Content-MAC": true, "X-Payload-Mac": true, "mac": true, "X_Body_Mac": true, "X-Sig": true,
		"X-Shopify-Hmac-Sha256": true, "X-Hub-Signature-256": true, "X-Gitlab-Token": true,
		"X-Imac-Mac": true, "X-Machine-Id": false, "X-Macro": false, "X-Macmac": false, "Imac": false, "Stomach": false, "X-Signal": false, "Content-Type": false, "X-Delivery-Id": false,
		// Case-insensitive as strings.ToLower is: the Kelvin sign lowers to k.
		"X-API-\u212Aey": true, "X-SESSION-ID": true, "X-PAYLOAD-MAC": true, "X-\u00C4-Mac": true,
		// Longer than the name buffer.
		strings.Repeat("X-Padding-", 10) + "Token": true, strings.Repeat("X-Padding-", 10) + "Mac": true, strings.Repeat("X-Padding-", 10): false,
	} {
		if got := events.CredentialLike(name); got != want {
			t.Errorf("CredentialLike(%q) = %t, want %t", name, got, want)
		}
	}
}

// Never drops its names whatever the filter would keep: by default, from
// an allow-list that names them, and besides drop_headers; names are
// case-insensitive, and the filter it was made from is unchanged.
func TestHeaderFilterNever(t *testing.T) {
	t.Parallel()
	h := http.Header{"Content-Type": {"application/json"}, "X-Custom-Sig-Value": {"s"}, "X-Keep": {"k"}, "X-Drop": {"d"}}
	for name, f := range map[string]events.HeaderFilter{
		"default":      {},
		"store":        events.NewHeaderFilter([]string{"X-Custom-Sig-Value", "X-Keep"}, nil),
		"drop_headers": events.NewHeaderFilter(nil, []string{"X-Drop"}),
	} {
		got := f.Never("x-custom-sig-value").Filter(h)
		if got.Get("X-Custom-Sig-Value") != "" || got.Get("X-Keep") != "k" || got.Get("Content-Type") == "" {
			t.Errorf("%s: Never kept %v; want X-Custom-Sig-Value dropped, X-Keep and Content-Type kept", name, got)
		}
		if name == "store" && f.Filter(h).Get("X-Custom-Sig-Value") == "" {
			t.Errorf("%s: Never changed the filter it was called on", name)
		}
	}
}

// Testing a header name of usual length allocates nothing: the ingest
// tests every header of every request.
func TestCredentialLikeAllocatesNothing(t *testing.T) { //nolint:paralleltest // testing.AllocsPerRun refuses a parallel test
	for _, name := range []string{"X-Hub-Signature-256", "Content-Type", "X-Airtable-Content-MAC", "User-Agent"} {
		if n := testing.AllocsPerRun(100, func() { events.CredentialLike(name) }); n != 0 {
			t.Errorf("CredentialLike(%q): %.0f allocations, want none", name, n)
		}
	}
}
