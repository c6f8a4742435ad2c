package dedup

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestWithoutClearPassword: on a worker connection without TLS, the
// require_auth of DATABASE_URL gets password (in clear) refused, and
// keeps the rest: nothing set refuses password alone; a list of refused
// methods gets it added; a list of allowed ones loses it (password alone:
// no authentication at all is all that is left). pgx accepts each result.
func TestWithoutClearPassword(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                       "!password",
		"!password":              "!password",
		"!md5":                   "!md5,!password",
		"!password,!md5":         "!md5,!password",
		"scram-sha-256":          "scram-sha-256",
		"scram-sha-256,password": "scram-sha-256",
		"password,md5":           "md5",
		"password":               "none",
	} {
		got := withoutClearPassword(in)
		if got != want {
			t.Errorf("withoutClearPassword(%q) = %q, want %q", in, got, want)
		}
		if _, err := pgconn.ParseConfig("host=127.0.0.1 require_auth=" + got); err != nil {
			t.Errorf("withoutClearPassword(%q) = %q, which pgx refuses: %v", in, got, err)
		}
	}
}
