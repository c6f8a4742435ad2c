package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/pgtest"
)

// startup is one start of the real hookgate binary: serve with the
// hookgate.yaml cfg, on a real database.
type startup struct {
	up  bool   // it answered /healthz (and was then stopped with SIGTERM)
	out string // what it printed (stdout and stderr)
}

// startBinaryOnce starts the real binary (serve --addr <free> --config <cfg>
// args…) with DATABASE_URL=dsn and the environment variables env (pairs),
// and waits until it answers GET /healthz, then stops it with SIGTERM, or
// until it exits on its own (a refusal at start-up).
func startBinaryOnce(t *testing.T, dsn, cfg string, env []string, args ...string) startup {
	t.Helper()
	bin := buildBinary(t)
	addr := freeAddr(t)
	cmd := exec.Command(bin, append([]string{"serve", "--addr", addr, "--config", writeConfig(t, cfg)}, args...)...)
	cmd.Env = []string{"DATABASE_URL=" + dsn, "HOOKGATE_LOG_FORMAT=text"}
	for i := 0; i+1 < len(env); i += 2 {
		cmd.Env = append(cmd.Env, env[i]+"="+env[i+1])
	}
	log := newLogSink()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c := newClient(t)
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-done:
			return startup{out: log.tail(1000)}
		default:
		}
		if r, err := get(t.Context(), c, "http://"+addr+"/healthz"); err == nil && r.status == 200 {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				<-done
			}
			return startup{up: true, out: log.tail(1000)}
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("the binary neither answered /healthz nor exited within a minute:\n%s", log.tail(40))
		}
		time.Sleep(20 * time.Millisecond) // polling a process that has no way to signal readiness
	}
}

// Weak admin tokens stop the real binary at start-up: dictionary words
// (however long the phrase), keyboard rows, sequences, as well as short,
// whitespace and repeated ones. The refusal says why and how to make a
// good one, and never repeats the token. Random tokens start it: make
// run's, openssl rand -hex 32's and base64 ones.
func TestBinaryRefusesWeakAdminTokens(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	for tok, why := range map[string]string{
		"abcdefghijklmnopqrstuvwxyz012345":                      "sequences",
		"ThisIsMyVerySecureAdminToken2026!":                     "dictionary words",
		"ThisIsMyVerySecureAdminTokenForTheHookgateServer2026!": "dictionary words",
		"qwertyuiopasdfghjklzxcvbnm123456":                      "common passwords",
		"QWERTYUIOPasdfghjkl;zxcvbnm,./1234567890":              "keyboard patterns",
		"correct horse battery staple and some more words here": "dictionary words",
		"short-admin-token-31-characters":                       "bits of entropy",
		strings.Repeat(" ", 40):                                 "only whitespace",
		strings.Repeat("abcd", 12):                              "pattern of 4 characters repeated",
	} {
		st := startBinaryOnce(t, dsn, senderConfig, []string{"HOOKGATE_ADMIN_TOKEN", tok})
		if st.up {
			t.Errorf("%q: the binary started, want a refusal (%s)", tok, why)
			continue
		}
		if !strings.Contains(st.out, "admin token") || !strings.Contains(st.out, why) || !strings.Contains(st.out, "openssl rand -hex 32") {
			t.Errorf("%q: the refusal does not say %q and how to make a token:\n%s", tok, why, st.out)
		}
		if strings.TrimSpace(tok) != "" && strings.Contains(st.out, tok) {
			t.Errorf("the refusal repeats the token %q:\n%s", tok, st.out)
		}
	}

	good := []string{randHex(32), randHex(24), randHex(16)}
	if out, err := exec.Command("openssl", "rand", "-hex", "32").Output(); err == nil {
		good = append(good, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("openssl", "rand", "-base64", "32").Output(); err == nil {
		good = append(good, strings.TrimSpace(string(out)))
	}
	script, err := os.ReadFile("../../.ci/run-local.sh")
	if err != nil {
		t.Fatal(err)
	}
	mk := regexp.MustCompile(`head -c \d+ /dev/urandom[^>]*`).Find(script)
	if mk == nil {
		t.Fatal(".ci/run-local.sh makes no admin token with head -c N /dev/urandom any more: update this test")
	}
	out, err := exec.Command("bash", "-c", string(mk)).Output()
	if err != nil {
		t.Fatal(err)
	}
	good = append(good, string(out))
	for _, tok := range good {
		if st := startBinaryOnce(t, dsn, senderConfig, []string{"HOOKGATE_ADMIN_TOKEN", tok}); !st.up {
			t.Errorf("a random token (%d characters) is refused:\n%s", len(tok), st.out)
		}
	}
}
