package signature_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the seed corpora in testdata/fuzz from fuzzSeeds")

type seed struct {
	name string
	vals []any
}

// fuzzSeeds is the seed corpus of every fuzz target, written to
// testdata/fuzz/<target>/<name> in Go's corpus format. Valid signatures are
// computed by the independent helpers with the fuzz verifiers' secrets.
func fuzzSeeds() map[string][]seed {
	g := []byte(githubDocSecret)
	sh := []byte(shopifyOwnSecret)
	gen := []byte(genericOwnSecret)
	sl := []byte(slackDocSecret)
	st := []byte(stripeOwnSecret)
	key := standardDocKey()
	stripeV1 := func(k []byte, ts, b string) string { return "v1=" + macHex(k, ts, ".", b) }
	stdV1 := func(k []byte, id, ts, b string) string { return "v1," + macB64(k, id, ".", ts, ".", b) }
	docSig := strings.TrimPrefix(standardDocSignature, "v1,")
	return map[string][]seed{
		"FuzzParseUnixTimestamp": {
			{"slack-example", []any{"1531420618"}},
			{"zero", []any{"0"}},
			{"leading-zero", []any{"01"}},
			{"negative", []any{"-1"}},
			{"plus", []any{"+1"}},
			{"space", []any{" 1"}},
			{"fraction", []any{"1.5"}},
			{"max-digits", []any{"999999999999999999"}},
			{"too-many-digits", []any{"1000000000000000000"}},
			{"int64-overflow", []any{"9223372036854775808"}},
			{"exponent", []any{"1e9"}},
			{"empty", []any{""}},
		},
		"FuzzParseSlackSignature": {
			{"slack-example", []any{slackDocSignature}},
			{"upper-hex", []any{"v0=" + strings.ToUpper(slackDocSignature[3:])}},
			{"upper-version", []any{"V0=" + slackDocSignature[3:]}},
			{"short", []any{slackDocSignature[:66]}},
			{"not-hex", []any{"v0=" + notHex}},
			{"other-version", []any{"v1=" + slackDocSignature[3:]}},
			{"space", []any{"v0= " + slackDocSignature[3:]}},
			{"empty", []any{""}},
		},
		"FuzzParseStripeHeader": {
			{"valid", []any{"t=1700000000," + stripeV1(st, "1700000000", stripeOwnBody)}},
			{"stripe-docs-shape", []any{"t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"}},
			{"two-v1", []any{"t=1700000000,v1=" + notHex + ",v1=" + stripeOwnV1 + ",v1=" + stripeOwnV1}},
			{"v1-first", []any{"v1=" + stripeOwnV1 + ",t=1700000000"}},
			{"spaces", []any{" t=1700000000 ,\tv1=" + stripeOwnV1 + " "}},
			{"duplicate-t", []any{"t=1,t=2,v1=" + stripeOwnV1}},
			{"no-t", []any{"v1=" + stripeOwnV1}},
			{"no-v1", []any{"t=1700000000,v0=" + stripeOwnV1}},
			{"too-many-v1", []any{stripeMany(17)}},
			{"empty-elements", []any{"t=1,,,=,v1,v1=,=" + stripeOwnV1}},
			{"upper-keys", []any{"T=1700000000,V1=" + stripeOwnV1}},
		},
		"FuzzParseStandardSignatures": {
			{"reference-example", []any{standardDocSignature}},
			{"spec-example", []any{"v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg=="}},
			{"tabs", []any{"\tv2," + docSig + "\t" + standardDocSignature + "\n"}},
			{"empty-v1", []any{"v1, v1,, ,v1"}},
			{"unpadded", []any{"v1," + strings.TrimRight(docSig, "=")}},
			{"padding-bits", []any{"v1," + docSig[:42] + "B="}},
			{"too-many", []any{standardMany(17)}},
			{"max", []any{standardMany(16)}},
		},
		"FuzzDecodeStandardSecret": {
			{"reference-secret", []any{standardDocSecret}},
			{"no-prefix", []any{strings.TrimPrefix(standardDocSecret, "whsec_")}},
			{"prefix-only", []any{"whsec_"}},
			{"padded", []any{"whsec_AQI="}},
			{"unpadded", []any{"whsec_AQI"}},
			{"only-padding", []any{"whsec_===="}},
			{"url-alphabet", []any{"whsec_-_-_"}},
			// Found by fuzzing: the base64 decoder skipped the CR.
			{"regression-cr", []any{"whsec_00\r0"}},
			{"trailing-newline", []any{standardDocSecret + "\n"}},
		},
		"FuzzGitHubVerify": {
			{"github-example", []any{githubDocSignature, []byte(githubDocBody)}},
			{"upper-hex", []any{"sha256=" + strings.ToUpper(githubDocSignature[7:]), []byte(githubDocBody)}},
			{"upper-prefix", []any{"SHA256=" + githubDocSignature[7:], []byte(githubDocBody)}},
			{"padded", []any{" " + githubDocSignature + " ", []byte(githubDocBody)}},
			{"second-secret", []any{"sha256=" + macHex(secret2, body), []byte(body)}},
			{"changed-body", []any{githubDocSignature, []byte("Hello, World?")}},
			{"sha1", []any{"sha1=" + githubDocSignature[7:47], []byte(githubDocBody)}},
			{"empty", []any{"", []byte{}}},
			{"empty-key", []any{"sha256=" + macHex([]byte{}, ""), []byte{}}},
			{"valid-unused", []any{"sha256=" + macHex(g, "x"), []byte("x")}},
		},
		"FuzzShopifyVerify": {
			{"own-vector", []any{shopifyOwnSignature, []byte(shopifyOwnBody)}},
			{"unpadded", []any{strings.TrimRight(shopifyOwnSignature, "="), []byte(shopifyOwnBody)}},
			{"url-alphabet", []any{strings.NewReplacer("+", "-", "/", "_").Replace(shopifyOwnSignature), []byte(shopifyOwnBody)}},
			{"hex", []any{macHex(sh, shopifyOwnBody), []byte(shopifyOwnBody)}},
			{"second-secret", []any{macB64(secret2, body), []byte(body)}},
			{"empty-body", []any{macB64(sh, ""), []byte{}}},
		},
		"FuzzHMACVerify": {
			{"own-hex", []any{"sha256=" + genericOwnHex, []byte(genericOwnBody)}},
			{"own-base64", []any{genericOwnBase64, []byte(genericOwnBody)}},
			{"hex-no-prefix", []any{genericOwnHex, []byte(genericOwnBody)}},
			{"base64-with-prefix", []any{"sha256=" + genericOwnBase64, []byte(genericOwnBody)}},
			{"second-secret", []any{"sha256=" + macHex(secret2, body), []byte(body)}},
			{"empty-body", []any{macB64(gen, ""), []byte{}}},
		},
		"FuzzSlackVerify": {
			{"slack-example", []any{slackDocSignature, slackDocTimestamp, []byte(slackDocBody)}},
			{"second-secret", []any{"v0=" + macHex(secret2, "v0:1531420700:", body), "1531420700", []byte(body)}},
			{"edge-past", []any{"v0=" + macHex(sl, "v0:1531420318:", body), "1531420318", []byte(body)}},
			{"stale", []any{"v0=" + macHex(sl, "v0:1531420317:", body), "1531420317", []byte(body)}},
			{"edge-future", []any{"v0=" + macHex(sl, "v0:1531420918:", body), "1531420918", []byte(body)}},
			{"future", []any{"v0=" + macHex(sl, "v0:1531420919:", body), "1531420919", []byte(body)}},
			{"leading-zero", []any{"v0=" + macHex(sl, "v0:01531420618:", body), "01531420618", []byte(body)}},
			{"padded-timestamp", []any{"v0=" + macHex(sl, "v0: 1531420618:", body), " 1531420618", []byte(body)}},
			{"empty", []any{"", "", []byte{}}},
		},
		"FuzzStripeVerify": {
			{"own-vector", []any{"t=1700000000,v1=" + stripeOwnV1, []byte(stripeOwnBody)}},
			{"rolled", []any{"t=1700000100," + stripeV1(secret3, "1700000100", body) + "," + stripeV1(secret2, "1700000100", body) + ",v0=00", []byte(body)}},
			{"edge-past", []any{"t=1699999700," + stripeV1(st, "1699999700", body), []byte(body)}},
			{"stale", []any{"t=1699999699," + stripeV1(st, "1699999699", body), []byte(body)}},
			{"future", []any{"t=1700000301," + stripeV1(st, "1700000301", body), []byte(body)}},
			{"upper-hex", []any{"t=1700000000,v1=" + strings.ToUpper(stripeOwnV1), []byte(stripeOwnBody)}},
			{"v0-only", []any{"t=1700000000,v0=" + stripeOwnV1, []byte(stripeOwnBody)}},
			{"empty", []any{"", []byte{}}},
		},
		"FuzzStandardWebhooksVerify": {
			{"reference-example", []any{standardDocID, "1614265330", standardDocSignature, []byte(standardDocBody)}},
			{"reference-multi", []any{standardDocID, "1614265330", "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + standardDocSignature, []byte(standardDocBody)}},
			{"second-secret", []any{"msg_1", "1614265400", stdV1(secret2, "msg_1", "1614265400", body), []byte(body)}},
			{"dotted-id", []any{"msg.1", "1614265330", stdV1(key, "msg.1", "1614265330", body), []byte(body)}},
			{"stale", []any{"msg_1", "1614265029", stdV1(key, "msg_1", "1614265029", body), []byte(body)}},
			{"edge-future", []any{"msg_1", "1614265630", stdV1(key, "msg_1", "1614265630", body), []byte(body)}},
			{"asymmetric-only", []any{"msg_1", "1614265330", "v1a," + docSig, []byte(body)}},
			{"empty", []any{"", "", "", []byte{}}},
		},
	}
}

func corpusFile(vals []any) []byte {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch v := v.(type) {
		case string:
			fmt.Fprintf(&b, "string(%q)\n", v)
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		default:
			panic(fmt.Sprintf("unsupported seed type %T", v))
		}
	}
	return []byte(b.String())
}

// TestFuzzSeedCorpus checks that testdata/fuzz holds fuzzSeeds, or
// rewrites it with -update-seeds. Other files there (such as regression
// inputs found by fuzzing) are left alone.
func TestFuzzSeedCorpus(t *testing.T) {
	t.Parallel()
	for target, seeds := range fuzzSeeds() {
		dir := filepath.Join("testdata", "fuzz", target)
		if *updateSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range seeds {
			path := filepath.Join(dir, s.name)
			want := corpusFile(s.vals)
			if *updateSeeds {
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != string(want) {
				t.Errorf("%s is missing or stale; run go test ./internal/signature/ -run TestFuzzSeedCorpus -update-seeds", path)
			}
		}
	}
}
