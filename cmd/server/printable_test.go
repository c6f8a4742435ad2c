package main

import "testing"

// What a hostile answer holds reaches a terminal without its control
// characters: C0 and DEL, C1 (an 8-bit CSI among them) and the
// bidirectional overrides that reorder what a person reads.
func TestPrintableStripsControls(t *testing.T) {
	for in, want := range map[string]string{
		"ok\x1b[31mred":           "ok.[31mred",
		"8-bit \u009b31m csi":     "8-bit .31m csi",
		"bidi \u202eevil\u202c":   "bidi .evil.",
		"isolate \u2066x\u2069":   "isolate .x.",
		"tabs\tand\nlines stay":   "tabs\tand\nlines stay",
		"Grüße, 日本, emoji 🙂":      "Grüße, 日本, emoji 🙂",
		"del\x7f and nul\x00 too": "del. and nul. too",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}
