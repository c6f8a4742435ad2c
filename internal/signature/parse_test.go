package signature_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/signature"
)

func TestParseUnixTimestamp(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int64{
		"0":                  0,
		"1":                  1,
		"1531420618":         1531420618,
		"999999999999999999": 999999999999999999,
	} {
		got, err := signature.ParseUnixTimestamp(s)
		if err != nil || got != want {
			t.Errorf("ParseUnixTimestamp(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{
		"", " 1", "1 ", "-1", "+1", "01", "00", "1e9", "1.5", "0x10", "١٢٣",
		"1000000000000000000", "9223372036854775807", "99999999999999999999999",
	} {
		got, err := signature.ParseUnixTimestamp(s)
		if !errors.Is(err, signature.ErrMalformed) || got != 0 {
			t.Errorf("ParseUnixTimestamp(%q) = %d, %v; want ErrMalformed", s, got, err)
		}
	}
}

func TestParseSlackSignature(t *testing.T) {
	t.Parallel()
	got, ok := signature.ParseSlackSignature(slackDocSignature)
	if want, _ := hex.DecodeString(slackDocSignature[3:]); !ok || !bytes.Equal(got, want) {
		t.Fatalf("ParseSlackSignature(example) = %x, %v", got, ok)
	}
	got, ok = signature.ParseSlackSignature(strings.ToUpper(slackDocSignature[:3]) + slackDocSignature[3:])
	if ok || got != nil {
		t.Errorf("ParseSlackSignature(V0=...) = %x, %v; want nil, false", got, ok)
	}
	for _, s := range []string{"", "v0=", "v0", "v1=" + validHex, "v0=" + validHex[1:], "v0=" + notHex, "v0=" + validHex + " "} {
		if got, ok := signature.ParseSlackSignature(s); ok || got != nil {
			t.Errorf("ParseSlackSignature(%q) = %x, %v; want nil, false", s, got, ok)
		}
	}
}

func TestParseStripeHeader(t *testing.T) {
	t.Parallel()
	a := strings.Repeat("ab", 32)
	b := strings.Repeat("CD", 32)
	dec := func(s ...string) [][]byte {
		var out [][]byte
		for _, x := range s {
			v, _ := hex.DecodeString(x)
			out = append(out, v)
		}
		return out
	}
	for _, tc := range []struct {
		in   string
		ts   int64
		want [][]byte
	}{
		{"t=1,v1=" + a, 1, dec(a)},
		{"v1=" + a + ",t=1492774577", 1492774577, dec(a)},
		{"t=5,v1=" + a + ",v1=" + b + ",v0=" + a, 5, dec(a, b)},
		{" t=5 , v1=" + a + " ", 5, dec(a)},
		{"t=5,v1=" + notHex + ",v1=" + b, 5, dec(b)},
		{"t=5,v1=" + a + ",,x,scheme=other,v1", 5, dec(a)},
		{"t=5," + strings.TrimPrefix(stripeMany(signature.MaxSignatures), "t=1700000000,"), 5, dec(strings.Split(strings.Repeat(validHex+" ", signature.MaxSignatures), " ")[:signature.MaxSignatures]...)},
	} {
		ts, got, err := signature.ParseStripeHeader(tc.in)
		if err != nil || ts != tc.ts || len(got) != len(tc.want) {
			t.Errorf("ParseStripeHeader(%q) = %d, %x, %v; want %d, %x", tc.in, ts, got, err, tc.ts, tc.want)
			continue
		}
		for i := range got {
			if !bytes.Equal(got[i], tc.want[i]) {
				t.Errorf("ParseStripeHeader(%q)[%d] = %x, want %x", tc.in, i, got[i], tc.want[i])
			}
		}
	}
	for _, in := range []string{
		"", "t=1", "v1=" + a, "t=1,v0=" + a, "t=1,v1=" + a[:63], "t=,v1=" + a, "t=01,v1=" + a,
		"t=1,t=1,v1=" + a, "T=1,v1=" + a, "t=1,V1=" + a, "t = 1,v1=" + a, "t=1,v1 = " + a,
		stripeMany(signature.MaxSignatures + 1), "t=1,v1=" + a + "," + strings.Repeat(" ", signature.MaxHeaderBytes),
	} {
		ts, got, err := signature.ParseStripeHeader(in)
		if !errors.Is(err, signature.ErrMalformed) || ts != 0 || got != nil {
			short := in
			if len(short) > 80 {
				short = short[:80] + "..."
			}
			t.Errorf("ParseStripeHeader(%q) = %d, %x, %v; want ErrMalformed", short, ts, got, err)
		}
	}
}

func TestParseStandardSignatures(t *testing.T) {
	t.Parallel()
	sig := strings.TrimPrefix(standardDocSignature, "v1,")
	other := "K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{standardDocSignature, []string{sig}},
		{"v1," + other + " v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg== " + standardDocSignature, []string{other, sig}},
		{"  v2," + other + "\t" + standardDocSignature + "  ", []string{sig}},
		{"v1,!!!! v1," + sig, []string{sig}},
		{"v1," + sig + ",extra v1," + other, []string{other}},
		{standardMany(signature.MaxSignatures), strings.Fields(strings.Repeat(validB64+" ", signature.MaxSignatures))},
		{"", nil},
		{"v1a," + sig, nil},
		{"V1," + sig, nil},
		{"v1, " + sig, nil},
		{"v1," + strings.TrimRight(sig, "="), nil},
		{"v1," + sig[:43] + "B", nil},
		{standardMany(signature.MaxSignatures + 1), nil},
		{standardDocSignature + strings.Repeat(" ", signature.MaxHeaderBytes), nil},
	} {
		got := signature.ParseStandardSignatures(tc.in)
		if len(got) != len(tc.want) {
			t.Errorf("ParseStandardSignatures(%.80q) = %d signatures, want %d", tc.in, len(got), len(tc.want))
			continue
		}
		for i := range got {
			if s := b64(got[i]); s != tc.want[i] {
				t.Errorf("ParseStandardSignatures(%.80q)[%d] = %s, want %s", tc.in, i, s, tc.want[i])
			}
		}
	}
}
