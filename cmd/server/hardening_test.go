package main

import (
	"bytes"
	"strings"
	"testing"
)

// An admin token shorter than 32 characters is refused at start-up, with
// the reason; the token itself is not repeated.
func TestRunRejectsShortAdminToken(t *testing.T) {
	t.Parallel()
	short := "short-admin-token-31-characters"
	for _, tc := range []struct {
		args []string
		env  []string
	}{
		{[]string{"serve", "--admin-token", short}, nil},
		{[]string{"serve"}, []string{"HOOKGATE_ADMIN_TOKEN", short}},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), tc.args, envOf(append(tc.env, "DATABASE_URL", "postgres://127.0.0.1:1/x")...), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "admin token") || !strings.Contains(err.Error(), "at least 32") {
			t.Errorf("%q: err = %v, want an error saying the admin token needs at least 32 characters", tc.args, err)
		}
		if err != nil && strings.Contains(err.Error()+stdout.String()+stderr.String(), short) {
			t.Errorf("the refusal repeats the token: %v", err)
		}
	}
}
