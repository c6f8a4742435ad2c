package authlimit

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// The client is the TCP peer, or, behind a trusted proxy, the last address
// of X-Forwarded-For that is not a trusted proxy; the header from anyone
// else is ignored.
func TestClientBehindTrustedProxies(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, tc := range []struct {
		peer string
		xff  []string
		want string
	}{
		{"192.0.2.1:1", nil, "192.0.2.1"},
		{"192.0.2.1:1", []string{"203.0.113.9"}, "192.0.2.1"}, // not a trusted proxy: the header is ignored
		{"10.1.2.3:1", nil, "10.1.2.3"},                       // a trusted proxy without the header
		{"10.1.2.3:1", []string{"203.0.113.9"}, "203.0.113.9"},
		{"10.1.2.3:1", []string{"198.51.100.1, 203.0.113.9"}, "203.0.113.9"},             // the client may write the left part
		{"10.1.2.3:1", []string{"203.0.113.9, 10.9.9.9"}, "203.0.113.9"},                 // two trusted proxies in a row
		{"10.1.2.3:1", []string{"198.51.100.1", "203.0.113.9, 10.9.9.9"}, "203.0.113.9"}, // several headers
		{"10.1.2.3:1", []string{"10.7.7.7, 10.9.9.9"}, "10.7.7.7"},                       // all trusted: the first
		{"10.1.2.3:1", []string{"203.0.113.9, garbage"}, "10.1.2.3"},                     // not an address: the peer
		{"[::1]:1", []string{"2001:db8::5"}, "2001:db8::5"},
		{"[::ffff:10.1.2.3]:1", []string{"::ffff:203.0.113.9"}, "203.0.113.9"},
	} {
		r := httptest.NewRequest("GET", "/v1/senders", nil)
		r.RemoteAddr = tc.peer
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := Client(r, trusted); got.String() != tc.want {
			t.Errorf("peer %s, X-Forwarded-For %q: client %s, want %s", tc.peer, tc.xff, got, tc.want)
		}
	}
}

// Behind a trusted proxy, each client has its own allowance: one that
// used it up does not limit another, and cannot escape its own by
// prepending addresses to X-Forwarded-For.
func TestLimiterCountsClientsBehindAProxy(t *testing.T) {
	t.Parallel()
	l := New(netip.MustParsePrefix("10.0.0.0/8"))
	req := func(xff string) *http.Request {
		r := httptest.NewRequest("GET", "/v1/senders", nil)
		r.RemoteAddr = "10.0.0.1:4000"
		r.Header.Set("X-Forwarded-For", xff)
		return r
	}
	for range FailureBurst + 1 {
		l.Failed(req("203.0.113.9"))
	}
	if l.Blocked(req("203.0.113.9")) <= 0 {
		t.Error("a client past its burst behind the proxy is not blocked")
	}
	if l.Blocked(req("1.2.3.4, 203.0.113.9")) <= 0 {
		t.Error("a client escapes its limit by writing another address in front of its own")
	}
	if d := l.Blocked(req("198.51.100.1")); d != 0 {
		t.Errorf("another client behind the same proxy is blocked for %v", d)
	}
}

// Weak admin tokens are refused, with the reason and without the token;
// tokens such as make run's pass.
func TestCheckToken(t *testing.T) {
	t.Parallel()
	weak := map[string]string{
		strings.Repeat("a", 32):                                             "one character repeated",
		strings.Repeat(" ", 32):                                             "only whitespace",
		"\t\n \t\n \t\n \t\n \t\n \t\n \t\n \t\n":                           "only whitespace",
		"0f6c2b9e4d8a71355e09c3b7a2f4d6e8\n":                                "begins or ends with whitespace",
		" 0f6c2b9e4d8a71355e09c3b7a2f4d6e8":                                 "begins or ends with whitespace",
		strings.Repeat("hookgate", 6):                                       "pattern of 8 characters repeated",
		strings.Repeat("0123456789", 4) + "0123":                            "pattern of 10 characters repeated",
		"short-admin-token-31-characters":                                   "bits of entropy",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab":                            "bits of entropy",
		"00000000000000000000000000000000000000000000000000000000000000001": "bits of entropy",
		"aaaaaaaabbbbbbbbccccccccdddddddd":                                  "bits of entropy",
		// Issue 29: long enough and varied enough, but made of what
		// guessers try first.
		"abcdefghijklmnopqrstuvwxyz012345":                      "sequences",
		"zyxwvutsrqponmlkjihgfedcba987654":                      "sequences",
		"ThisIsMyVerySecureAdminToken2026!":                     "dictionary words",
		"MySuperSecretAdminTokenForHookgate":                    "dictionary words",
		"ThisIsMyVerySecureAdminTokenForTheHookgateServer2026!": "dictionary words",
		"correct horse battery staple and some more words here": "dictionary words",
		"correcthorsebatterystaplecorrecthorse":                 "dictionary words",
		"my-admin-token-for-local-testing-only":                 "dictionary words",
		"qwertyuiopasdfghjklzxcvbnm123456":                      "common passwords",
		"QWERTYUIOPasdfghjkl;zxcvbnm,./1234567890":              "keyboard patterns",
		"SuperSecretPassword123!SuperSecret":                    "common passwords",
		"deadbeefcafebabe0123456789abcdef":                      "dictionary words",
		"P4ssw0rd-Adm1n-T0ken-H00kg4te-2026":                    "dictionary words",
	}
	for tok, why := range weak {
		err := CheckToken(tok)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "admin token") {
			t.Errorf("%q: %v, want an error saying %q", tok, err, why)
			continue
		}
		if strings.TrimSpace(tok) != "" && strings.Contains(err.Error(), tok) {
			t.Errorf("the refusal repeats the token: %v", err)
		}
	}
	// 16 random bytes in hex whose characters came out uneven (2.94 bits
	// of Shannon entropy per character, as about one such draw in 10,000
	// does), as CI once drew and the former threshold refused.
	if err := CheckToken("5303fee0ea3a77037ceaca3eaeeb3e10"); err != nil {
		t.Errorf("an uneven draw of 16 random bytes in hex is refused: %v", err)
	}
	// openssl rand -hex 16's (128 bits), make run's (24 random bytes in
	// hex), openssl rand -hex 32's, and base64 ones (openssl rand -base64).
	// (A few dozen of each: MinRandomShare's comment has the figures of
	// 200,000.)
	for i := range 40 {
		for _, n := range []int{16, 24, 32} {
			b := make([]byte, n)
			_, _ = rand.Read(b)
			if err := CheckToken(hex.EncodeToString(b)); err != nil {
				t.Fatalf("try %d: %d random bytes in hex refused: %v", i, n, err)
			}
			if err := CheckToken(base64.StdEncoding.EncodeToString(b)); n > 16 && err != nil {
				t.Fatalf("try %d: %d random bytes in base64 refused: %v", i, n, err)
			}
		}
	}
	// Draws of 16 random bytes in hex that zxcvbn reads as many dates,
	// repeats and sequences: they keep 0.59 to 0.68 of their estimate (the
	// first kept the least of 200,000 draws; the others were among the
	// lowest of 20,000).
	for _, tok := range []string{"b041924ebdf5f090247931b931bf9135", "85bbb90478240106a70839524490d0d8", "f009241f951678d05f1929146d46deb8", "20123b25b25d2991198cc69117456c9b"} {
		if err := CheckToken(tok); err != nil {
			t.Errorf("an unlucky draw of 16 random bytes in hex is refused: %v", err)
		}
	}
}

// A token's pattern share is 1 without patterns and near 0 for a phrase;
// long tokens are read up to maxPatternBytes, quickly.
func TestPatternShare(t *testing.T) {
	t.Parallel()
	if share, _, kinds := PatternShare("x7Kq9vZp"); share < 0.999 || len(kinds) != 0 {
		t.Errorf("no pattern: share %v, kinds %q", share, kinds)
	}
	if share, _, kinds := PatternShare("passwordpasswordpassword"); share > 0.2 || len(kinds) == 0 {
		t.Errorf("a repeated word: share %v, kinds %q", share, kinds)
	}
	b := make([]byte, 4096)
	_, _ = rand.Read(b)
	long := hex.EncodeToString(b)
	start := time.Now()
	if share, _, _ := PatternShare(long); share < MinRandomShare {
		t.Errorf("8,192 random hex digits: share %v", share)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("8,192 characters took %v: only the first %d bytes should be read", d, maxPatternBytes)
	}
	if share, _, _ := PatternShare("é" + strings.Repeat("password", 8)); share > 0.3 {
		t.Errorf("a word after a multi-byte character: share %v", share)
	}
}
