package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// The gateway with an admin token and a read token (HOOKGATE_READ_TOKENS,
// as the flag --read-tokens): the read token reads GET /v1/audit and is
// refused a reload with 403 scope-missing; the admin token reloads; a
// change of the file under --config-watch reloads as "watch". Each reload
// is in the audit trail with who asked; the log lines name the tokens and
// never hold their values.
func TestServeAuditsReloadsByTokenAndWatch(t *testing.T) {
	t.Parallel()
	const admin = "3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a"
	const reader = "7c1e9a3b5d2f8e6a4c10b7d9f1e3a5c7"
	_, dsn := pgtest.NewDB(t)
	path := writeConfig(t, "senders:\n"+genericSender("acme"))
	s := startRunAt(t, dsn, path, "--config-watch", "--admin-token", admin, "--read-tokens", "ci-reader:"+reader)
	call := func(method, p, tok string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, s.base+p, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if st, b := call(http.MethodPost, "/v1/config/reload", reader); st != http.StatusForbidden || !strings.Contains(string(b), "scope-missing") {
		t.Fatalf("reload with the read token: %d %s", st, b)
	}
	if st, b := call(http.MethodPost, "/v1/config/reload", admin); st != http.StatusOK {
		t.Fatalf("reload with the admin token: %d %s", st, b)
	}
	if err := os.WriteFile(path, []byte("senders:\n"+genericSender("acme")+genericSender("bravo")), 0o600); err != nil {
		t.Fatal(err)
	}
	type row struct{ Token, Action, Outcome string }
	var got []row
	testkit.Poll(t, time.Minute, "the watch's reload in the audit trail", func() bool {
		st, b := call(http.MethodGet, "/v1/audit?action="+store.ActionReload, reader)
		if st != http.StatusOK {
			t.Fatalf("GET /v1/audit with the read token: %d %s", st, b)
		}
		var p struct{ Items []row }
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		got = p.Items
		return len(got) == 3
	}, func() string { return string(mustJSON(got)) })
	want := []row{{"watch", "reload", "ok"}, {"admin", "reload", "ok"}, {"ci-reader", "reload", "refused"}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("audit row %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// The console's requests name their token in the log too: the
	// sign-in's and a page's.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err := browser.PostForm(s.base+"/console/login", url.Values{"token": {reader}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/console/" {
		t.Errorf("the console's sign-in with the read token ended at %d %s", resp.StatusCode, resp.Request.URL)
	}
	named := func(path string) bool {
		for _, line := range strings.Split(s.log.tail(1000), "\n") {
			if strings.Contains(line, `"path":"`+path+`"`) && strings.Contains(line, `"token":"ci-reader"`) {
				return true
			}
		}
		return false
	}
	testkit.Poll(t, time.Minute, "the console's log lines to name the token", func() bool {
		return named("/console/login") && named("/console/")
	}, func() string { return s.log.tail(20) })
	log := s.log.tail(1000)
	if strings.Contains(log, admin) || strings.Contains(log, reader) {
		t.Error("the log holds a token's value")
	}
	if !strings.Contains(log, `"token":"ci-reader"`) || !strings.Contains(log, `"token":"admin"`) {
		t.Errorf("the request log lines do not name the tokens:\n%s", log)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
