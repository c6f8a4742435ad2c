package config_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/config"
)

// TestDiff: what two configurations differ in, by name: senders and targets
// added, removed and changed (with the YAML names of the fields that
// changed), the targets of an added or removed sender among the targets
// added or removed, and never a value (a secret that changed is named by
// its field only).
func TestDiff(t *testing.T) {
	t.Parallel()
	fromYAML := "senders:\n" +
		sender("acme", "delivery_id: { header: X-Id }", "signature: { scheme: hmac-sha256, header: X-Sig }", "secret: old-secret-value-0123456789",
			"forward:",
			"  - { name: keep, url: http://a.internal/k }",
			"  - { name: moved, url: http://a.internal/old, timeout: 5s }",
			"  - { name: gone, url: http://a.internal/g }",
			"  - { name: signed, url: http://a.internal/s, signing_secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw }") +
		sender("quiet", "delivery_id: { header: X-Id }") +
		sender("leaving", "delivery_id: { header: X-Id }", "forward:", "  - { name: l1, url: http://l.internal/ }")
	from := mustParse(t, fromYAML, noEnv)
	to := mustParse(t, "senders:\n"+
		sender("acme", "delivery_id: { header: X-Id }", "signature: { scheme: hmac-sha256, header: X-Sig }", "secret: new-secret-value-9876543210", "retention: 24h",
			"forward:",
			"  - { name: keep, url: http://a.internal/k }",
			"  - { name: moved, url: http://a.internal/new, timeout: 7s }",
			"  - { name: added, url: http://a.internal/n }",
			"  - { name: signed, url: http://a.internal/s, signing_secret: whsec_C2lnbmluZyBzZWNyZXQgbnVtYmVyIHR3bw== }")+
		sender("quiet", "delivery_id: { header: X-Id }")+
		sender("arriving", "delivery_id: { header: X-Id }", "forward:", "  - { name: a1, url: http://n.internal/ }"),
		noEnv)

	got := config.Diff(from, to)
	want := config.Changes{
		SendersAdded:   []string{"arriving"},
		SendersRemoved: []string{"leaving"},
		SendersChanged: []config.Changed{{TargetName: config.TargetName{Sender: "acme"}, Fields: []string{"secret", "retention", "event_retention"}}},
		TargetsAdded:   []config.TargetName{{Sender: "acme", Target: "added"}, {Sender: "arriving", Target: "a1"}},
		TargetsRemoved: []config.TargetName{{Sender: "acme", Target: "gone"}, {Sender: "leaving", Target: "l1"}},
		TargetsChanged: []config.Changed{
			{TargetName: config.TargetName{Sender: "acme", Target: "moved"}, Fields: []string{"url", "timeout"}},
			{TargetName: config.TargetName{Sender: "acme", Target: "signed"}, Fields: []string{"signing_secret"}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Diff:\n got %+v\nwant %+v", got, want)
	}
	if got.None() {
		t.Error("None() is true for configurations that differ")
	}
	for _, secret := range []string{"old-secret", "new-secret", "whsec_"} {
		if strings.Contains(strings.ToLower(describeChanges(got)), strings.ToLower(secret)) {
			t.Errorf("the changes show a secret's value (%s)", secret)
		}
	}

	if same := config.Diff(from, mustParse(t, fromYAML, noEnv)); !same.None() {
		t.Errorf("the same file parsed twice differs: %+v", same)
	}
	// A target moved within its list is the same target: order is not a
	// change.
	a := mustParse(t, "senders:\n"+sender("s", "delivery_id: { header: X-Id }", "forward:", "  - { name: x, url: http://x/ }", "  - { name: y, url: http://y/ }"), noEnv)
	b := mustParse(t, "senders:\n"+sender("s", "delivery_id: { header: X-Id }", "forward:", "  - { name: y, url: http://y/ }", "  - { name: x, url: http://x/ }"), noEnv)
	if d := config.Diff(a, b); !d.None() {
		t.Errorf("reordered targets: %+v, want no change", d)
	}
}

// describeChanges writes c as %+v does.
func describeChanges(c config.Changes) string {
	var b strings.Builder
	for _, ch := range append(c.SendersChanged, c.TargetsChanged...) {
		b.WriteString(ch.String() + strings.Join(ch.Fields, ","))
	}
	for _, n := range append(c.TargetsAdded, c.TargetsRemoved...) {
		b.WriteString(n.String())
	}
	b.WriteString(strings.Join(append(c.SendersAdded, c.SendersRemoved...), ","))
	return b.String()
}
