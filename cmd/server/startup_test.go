package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
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
		randHex(24) + "\n":                                      "begins or ends with whitespace",
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
		if bare := strings.TrimSpace(tok); bare != "" && strings.Contains(st.out, bare) {
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

// refusal is a hookgate.yaml the real binary must refuse at start-up.
type refusal struct {
	name   string
	cfg    string
	env    []string // pairs
	want   []string // in the output
	hidden string   // never in the output
}

// checkRefusals starts the real binary with each configuration of cases
// and fails the test when one starts, or its refusal lacks a want or shows
// its hidden value.
func checkRefusals(t *testing.T, dsn string, cases []refusal) {
	t.Helper()
	for _, tc := range cases {
		st := startBinaryOnce(t, dsn, tc.cfg, tc.env)
		if st.up {
			t.Errorf("%s: the binary started, want a refusal", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(st.out, w) {
				t.Errorf("%s: the refusal does not say %q:\n%s", tc.name, w, st.out)
			}
		}
		if tc.hidden != "" && strings.Contains(st.out, tc.hidden) {
			t.Errorf("%s: the refusal shows the secret %q:\n%s", tc.name, tc.hidden, st.out)
		}
	}
}

// checkStarts starts the real binary with each configuration of cfgs (by
// name) and fails the test when one does not start.
func checkStarts(t *testing.T, dsn string, cfgs map[string]string) {
	t.Helper()
	for name, cfg := range cfgs {
		if st := startBinaryOnce(t, dsn, cfg, nil); !st.up {
			t.Errorf("%s: the binary did not start:\n%s", name, st.out)
		}
	}
}

// whsec returns a Standard Webhooks secret of an n-byte random key.
func whsec(n int) string {
	return "whsec_" + base64.StdEncoding.EncodeToString([]byte(randHex(n)[:n]))
}

// Weak signing secrets stop the real binary at start-up, naming the sender
// (or target) and the field, never the value: under 16 bytes (of the key a
// whsec_ secret decodes to), only whitespace, or padded with whitespace
// (from the environment too); so does a tolerance above an hour. Their
// safe neighbours start it; an Ed25519 public key is not a secret and
// keeps its own size.
func TestBinaryRefusesWeakSecrets(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	long := randHex(16)       // 32 bytes
	const short = "s3cr3t-9z" // 9 bytes
	checkRefusals(t, dsn, []refusal{
		{"short secret", "senders:\n  - name: gh\n    preset: github\n    secret: " + short + "\n", nil,
			[]string{"senders[0].secret (gh)", "9 bytes", "at least 16"}, short},
		{"one-character secret", "senders:\n  - name: gh\n    preset: github\n    secret: x\n", nil,
			[]string{"senders[0].secret (gh)", "1 byte", "at least 16"}, ""},
		{"short secret in secrets", "senders:\n  - name: gh\n    preset: github\n    secrets: [" + long + ", " + short + "]\n", nil,
			[]string{"senders[0].secrets[1] (gh)", "at least 16"}, short},
		{"short signature.secret", "senders:\n  - name: b\n    preset: generic\n    delivery_id: { header: X-Id }\n" +
			"    signature: { scheme: hmac-sha256, header: X-Sig, secret: " + short + " }\n", nil,
			[]string{"senders[0].signature.secret (b)", "at least 16"}, short},
		{"whitespace secret", "senders:\n  - name: gh\n    preset: github\n    secret: \"                    \"\n", nil,
			[]string{"senders[0].secret (gh)", "only whitespace"}, ""},
		{"padded secret from the environment", "senders:\n  - name: gh\n    preset: github\n    secret: ${GH_SECRET}\n",
			[]string{"GH_SECRET", long + "\n"}, []string{"senders[0].secret (gh)", "whitespace"}, long},
		{"short Standard Webhooks key", "senders:\n  - name: sw\n    preset: standard-webhooks\n    secret: " + whsec(8) + "\n", nil,
			[]string{"senders[0].secret (sw)", "8 bytes", "at least 16"}, ""},
		{"short target signing secret", senderConfig + "    forward:\n      - name: t\n        url: http://127.0.0.1:1/x\n        signing_secret: " + whsec(10) + "\n", nil,
			[]string{"senders[0].forward[0].signing_secret (acme, target t)", "10 bytes", "at least 16"}, ""},
		{"short verify token", "senders:\n  - name: m\n    preset: meta\n    secret: " + long + "\n    verify_token: " + short + "\n", nil,
			[]string{"senders[0].verify_token (m)", "at least 16"}, short},
		{"tolerance of ten years", "senders:\n  - name: st\n    preset: stripe\n    secret: " + long + "\n    tolerance: 87600h\n", nil,
			[]string{"senders[0].tolerance", "at most 1h"}, long},
	})
	discordKey := hex.EncodeToString(ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey))
	checkStarts(t, dsn, map[string]string{
		"16-byte secret, 1h tolerance": "senders:\n  - name: st\n    preset: stripe\n    secret: " + randHex(8) + "\n    tolerance: 1h\n",
		"16-byte Standard Webhooks key and target key": "senders:\n  - name: sw\n    preset: standard-webhooks\n    secret: " + whsec(16) + "\n" +
			"    forward:\n      - name: t\n        url: http://127.0.0.1:1/x\n        signing_secret: " + whsec(16) + "\n",
		"an Ed25519 public key (not a secret)": "senders:\n  - name: d\n    preset: discord\n    secret: " + discordKey + "\n",
	})
}

// A preset that answers a provider's handshake (Slack's url_verification,
// Zoom's, Twitch's, Discord's PING, Meta's) with its signature check turned
// off would answer anyone's challenge: the real binary refuses it at
// start-up; with its check it starts.
func TestBinaryRefusesHandshakeWithoutSignature(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	checkRefusals(t, dsn, []refusal{
		{"slack without its signature check", "senders:\n  - name: sl\n    preset: slack\n    signature: { scheme: none }\n", nil,
			[]string{"senders[0].signature.scheme (sl)", "url_verification", "slack"}, ""},
		{"zoom without its signature check", "senders:\n  - name: z\n    preset: zoom\n    signature: { scheme: none }\n", nil,
			[]string{"senders[0].signature.scheme (z)", "zoom"}, ""},
		{"twitch without its signature check", "senders:\n  - name: tw\n    preset: twitch\n    signature: { scheme: none }\n", nil,
			[]string{"senders[0].signature.scheme (tw)", "twitch"}, ""},
		{"discord without its signature check", "senders:\n  - name: d\n    preset: discord\n    signature: { scheme: none }\n", nil,
			[]string{"senders[0].signature.scheme (d)", "discord"}, ""},
	})
	checkStarts(t, dsn, map[string]string{
		"slack with its check": "senders:\n  - name: sl\n    preset: slack\n    secret: " + randHex(16) + "\n",
		"generic without one":  senderConfig,
	})
}

// A target URL with a user name or password (whose credentials a forward
// would not send) stops the real binary at start-up, pointing to headers:,
// and never shows the password; the same credentials in headers: start it.
func TestBinaryRefusesCredentialsInTargetURL(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	checkRefusals(t, dsn, []refusal{
		{"target URL with a password", senderConfig + "    forward:\n      - name: t\n        url: http://svc:pw-q8x7@127.0.0.1:1/x\n", nil,
			[]string{"senders[0].forward[0].url (acme, target t)", "user name or password", "headers", "Authorization"}, "pw-q8x7"},
		{"target URL with a user name", senderConfig + "    forward:\n      - name: t\n        url: https://tok-3k9d@127.0.0.1:1/x\n", nil,
			[]string{"senders[0].forward[0].url (acme, target t)", "headers", "Authorization"}, "tok-3k9d"},
		{"target URL with a password from the environment", senderConfig + "    forward:\n      - name: t\n        url: ${TARGET_URL}\n",
			[]string{"TARGET_URL", "http://svc:pw-e5r2@127.0.0.1:1/x"},
			[]string{"senders[0].forward[0].url (acme, target t)", "headers"}, "pw-e5r2"},
	})
	checkStarts(t, dsn, map[string]string{
		"credentials in headers": senderConfig + "    forward:\n      - name: t\n        url: http://127.0.0.1:1/x\n        headers: { Authorization: \"Basic c3ZjOnB3\" }\n",
	})
}

// --forward-allowed-hosts (HOOKGATE_FORWARD_ALLOWED_HOSTS) restricts the
// hosts forwards reach, in the real binary on a real database: a target
// whose host is not in the list stops start-up, naming the target, the
// host and the setting; a listed name or address is forwarded to; a name
// allowed only by a CIDR prefix is checked at each connection against the
// address actually dialed, so localhost, let through start-up by
// 10.0.0.0/8 (a name that no name entry lists, with prefixes in the list),
// is never reached (by the fast path or by River's worker), and the
// forward fails saying why. Without the setting, any host is allowed.
func TestBinaryForwardAllowedHosts(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	tg := testkit.NewTarget(t, testkit.Always(http.StatusNoContent))
	_, port, err := net.SplitHostPort(strings.TrimPrefix(tg.Server(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	cfgFor := func(host string) string { return forwardConfig("http://"+host+":"+port+"/hooks", "2s", 1) }

	_, dsn := pgtest.NewDB(t)
	checkRefusals(t, dsn, []refusal{
		{"an address not in the list", cfgFor("127.0.0.1"), []string{"HOOKGATE_FORWARD_ALLOWED_HOSTS", "hooks.example.com,*.internal"},
			[]string{"senders[0].forward[0].url (acme, target t1)", "127.0.0.1", "HOOKGATE_FORWARD_ALLOWED_HOSTS"}, ""},
		{"a name not in the list", cfgFor("localhost"), []string{"HOOKGATE_FORWARD_ALLOWED_HOSTS", "hooks.example.com,*.localhost.internal"},
			[]string{"senders[0].forward[0].url (acme, target t1)", "localhost", "--forward-allowed-hosts"}, ""},
		{"a malformed entry", senderConfig, []string{"HOOKGATE_FORWARD_ALLOWED_HOSTS", "10.0.0.0/33"},
			[]string{"forward allowed hosts", "10.0.0.0/33"}, ""},
	})

	c := newClient(t)
	for _, tc := range []struct {
		name, host, allowed string
		args                []string
		delivered           bool
	}{
		{"no list", "127.0.0.1", "", nil, true},
		{"a listed address", "127.0.0.1", "hooks.example.com,127.0.0.1", nil, true},
		{"a listed name", "localhost", "localhost", nil, true},
		{"a name whose address is in a listed prefix", "localhost", "127.0.0.0/8,::1/128", nil, true},
		{"a name whose address is not in the listed prefix (fast path)", "localhost", "10.0.0.0/8", nil, false},
		{"a name whose address is not in the listed prefix (River)", "localhost", "10.0.0.0/8", []string{"--forward-fast-path=false"}, false},
	} {
		pool, dsn := pgtest.NewDB(t)
		before := len(tg.Hits())
		addr := freeAddr(t)
		args := append([]string{"--forward-allowed-hosts", tc.allowed}, append(tc.args, fastForwardFlags...)...)
		p := startBinaryWith(t, bin, dsn, addr, writeConfig(t, cfgFor(tc.host)), args...)
		waitHealthy(t, c, "http://"+addr, p)
		deliverAll(t, c, "http://"+addr, makeIDs("allow", 1))
		testkit.Poll(t, 45*time.Second, tc.name+": the forward to finish", func() bool {
			st := jobStates(t, pool)
			return st["completed"]+st["discarded"] == 1
		}, func() string { return fmt.Sprint(jobStates(t, pool)) })
		hits := len(tg.Hits()) - before
		if tc.delivered {
			if hits != 1 || jobStates(t, pool)["completed"] != 1 {
				t.Errorf("%s: %d requests reached the target, jobs %v; want the forward delivered", tc.name, hits, jobStates(t, pool))
			}
			continue
		}
		if hits != 0 {
			t.Errorf("%s: %d requests reached the target, want none", tc.name, hits)
		}
		var errs string
		for _, j := range forwardJobs(t, pool) {
			errs += strings.Join(j.Errors, " ")
		}
		if !strings.Contains(errs, "not allowed by --forward-allowed-hosts") {
			t.Errorf("%s: the forward's errors %q do not say the address is not allowed", tc.name, errs)
		}
	}
}
