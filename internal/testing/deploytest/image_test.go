package deploytest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for migrations.Pending
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
	"github.com/hookgate/hookgate/migrations"
)

// The environment of TestImage, which `make test-image` (.ci/test-image.sh)
// sets after building the image.
const (
	// envImage names the image to test (an ID or a name); unset, TestImage
	// is skipped.
	envImage = "HOOKGATE_TEST_IMAGE"
	// envEngine names the engine's command: podman (the default) or docker.
	envEngine = "HOOKGATE_TEST_ENGINE"
	// envLabel is a label (key=value) put on every container the test
	// creates, so that test-image.sh removes whatever a killed test left.
	envLabel = "HOOKGATE_TEST_CONTAINER_LABEL"
)

// imageUID is the user the image runs as (Containerfile's USER).
const imageUID = "65532"

// configPath is where the image reads hookgate.yaml (HOOKGATE_CONFIG).
const configPath = "/etc/hookgate/hookgate.yaml"

// engine runs podman (or docker) commands.
type engine struct {
	bin    string
	podman bool
	label  string // key=value, or ""
}

func newEngine(t *testing.T) engine {
	t.Helper()
	bin := os.Getenv(envEngine)
	if bin == "" {
		bin = "podman"
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("%s: %v (make test-image installs nothing; .ci/run installs podman and runc as root)", bin, err)
	}
	return engine{bin: bin, podman: filepath.Base(bin) == "podman", label: os.Getenv(envLabel)}
}

// run runs the engine with args and returns its standard output; it fails
// the test, with the command's standard error, when the command fails.
func (e engine) run(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", e.bin, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// runFlags are the flags of every container the test runs: the host's
// network (PostgreSQL and the forward target listen on 127.0.0.1), a
// read-only root file system without even a /tmp to write to (as
// Kubernetes' readOnlyRootFilesystem), no capabilities and no privilege
// escalation (the chart's securityContext).
func (e engine) runFlags(name string) []string {
	f := []string{"--name", name, "--network", "host", "--read-only",
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges"}
	if e.podman {
		f = append(f, "--read-only-tmpfs=false") // podman mounts tmpfs on /tmp, /run … otherwise
	}
	if e.label != "" {
		f = append(f, "--label", e.label)
	}
	return f
}

// remove removes the container name, whatever its state.
func (e engine) remove(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = exec.CommandContext(ctx, e.bin, "rm", "-f", name).Run()
}

// TestImage runs the image as a deployment would, against the test's
// PostgreSQL: the image's configuration and files, `migrate` on an empty
// database, then `serve` as non-root on a read-only root file system with
// hookgate.yaml mounted and its secrets in the environment, answering
// /healthz and /readyz, accepting a delivery, replaying it, forwarding it
// to a target on the host (signed, recorded as delivered in the operator
// API), and stopping on SIGTERM with exit status 0 within its shutdown
// timeout.
func TestImage(t *testing.T) {
	image := os.Getenv(envImage)
	if image == "" {
		t.Skip(envImage + " is not set: make test-image builds the image and runs this test")
	}
	e := newEngine(t)
	name := fmt.Sprintf("hookgate-test-%d-%s", os.Getpid(), randHex(4))

	t.Run("config", func(t *testing.T) { checkImageConfig(t, e, image) })
	t.Run("files", func(t *testing.T) { checkImageFiles(t, e, image, name+"-files") })

	dsn := emptyDB(t)
	t.Run("migrate", func(t *testing.T) { checkMigrate(t, e, image, name+"-migrate", dsn) })
	if t.Failed() {
		return
	}
	t.Run("serve", func(t *testing.T) { checkServe(t, e, image, name, dsn) })
}

// checkImageConfig checks what the image says of itself: the user, the
// command, where the configuration is read, and no HEALTHCHECK.
func checkImageConfig(t *testing.T, e engine, image string) {
	var inspected []struct {
		Config struct {
			User         string
			Env          []string
			Entrypoint   []string
			Cmd          []string
			ExposedPorts map[string]json.RawMessage
			Healthcheck  json.RawMessage
		}
		Architecture string
		Os           string
	}
	if err := json.Unmarshal(e.run(t, "image", "inspect", image), &inspected); err != nil || len(inspected) != 1 {
		t.Fatalf("image inspect: %v (%d images)", err, len(inspected))
	}
	c := inspected[0].Config
	if c.User != imageUID+":"+imageUID {
		t.Errorf("User = %q, want %s:%s", c.User, imageUID, imageUID)
	}
	if want := []string{"/usr/local/bin/hookgate"}; !slices.Equal(c.Entrypoint, want) {
		t.Errorf("Entrypoint = %q, want %q", c.Entrypoint, want)
	}
	if want := []string{"serve"}; !slices.Equal(c.Cmd, want) {
		t.Errorf("Cmd = %q, want %q", c.Cmd, want)
	}
	if !slices.Contains(c.Env, "HOOKGATE_CONFIG="+configPath) {
		t.Errorf("Env = %q: want HOOKGATE_CONFIG=%s", c.Env, configPath)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("ExposedPorts = %v, want 8080/tcp", c.ExposedPorts)
	}
	if len(c.Healthcheck) > 0 && string(c.Healthcheck) != "null" {
		t.Errorf("the image has a HEALTHCHECK (%s): probes use /healthz and /readyz", c.Healthcheck)
	}
	if inspected[0].Os != "linux" {
		t.Errorf("Os = %q, want linux", inspected[0].Os)
	}
}

// checkImageFiles exports a container of the image and checks its file
// system: the binary (static: no program interpreter) and the CA bundle,
// and no other file.
func checkImageFiles(t *testing.T, e engine, image, name string) {
	args := []string{"create", "--name", name}
	if e.label != "" {
		args = append(args, "--label", e.label)
	}
	e.run(t, append(args, image)...)
	t.Cleanup(func() { e.remove(name) })
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(e.run(t, "export", name)))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read the exported file system: %v", err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimPrefix(h.Name, "/")] = b
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"etc/ssl/certs/ca-certificates.crt", "usr/local/bin/hookgate"}; !slices.Equal(names, want) {
		t.Errorf("the image's files are %q, want %q", names, want)
	}
	if ca := files["etc/ssl/certs/ca-certificates.crt"]; bytes.Count(ca, []byte("BEGIN CERTIFICATE")) < 50 {
		t.Errorf("the CA bundle has %d certificates, want a real bundle", bytes.Count(ca, []byte("BEGIN CERTIFICATE")))
	}
	f, err := elf.NewFile(bytes.NewReader(files["usr/local/bin/hookgate"]))
	if err != nil {
		t.Fatalf("the binary is not ELF: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a program interpreter: it is dynamically linked, and a FROM scratch image has no libc")
		}
	}
}

// checkMigrate runs the image's migrate on the empty database dsn, with
// TZ set (the log's times are in that zone: the binary carries its time
// zone data), and checks that every migration was applied.
func checkMigrate(t *testing.T, e engine, image, name, dsn string) {
	t.Cleanup(func() { e.remove(name) })
	args := append([]string{"run"}, e.runFlags(name)...)
	args = append(args, "-e", "DATABASE_URL="+dsn, "-e", "TZ=Asia/Tokyo", image, "migrate")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s run … migrate: %v\n%s%s", e.bin, err, stdout.String(), stderr.String())
	}
	var applied struct {
		Time  string `json:"time"`
		Msg   string `json:"msg"`
		Count int    `json:"count"`
	}
	for line := range strings.Lines(stdout.String() + stderr.String()) {
		if json.Unmarshal([]byte(line), &applied) == nil && applied.Msg == "migrations applied" {
			break
		}
		applied.Msg = ""
	}
	if applied.Msg == "" || applied.Count == 0 {
		t.Fatalf("migrate logged no \"migrations applied\" with a count:\n%s%s", stdout.String(), stderr.String())
	}
	if !strings.HasSuffix(applied.Time, "+09:00") {
		t.Errorf("with TZ=Asia/Tokyo the log's time is %q, want +09:00: is the time zone data in the binary?", applied.Time)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pending, err := migrations.Pending(ctx, db)
	if err != nil || pending {
		t.Fatalf("after the image's migrate: pending %v, %v", pending, err)
	}
}

// checkServe runs the image's default command and uses it.
func checkServe(t *testing.T, e engine, image, name, dsn string) {
	const (
		signing  = "whsec_aW1hZ2UgdGVzdCBzaWduaW5nIGtleSAwMTIzNDU2Nzg5"
		shutdown = 10 * time.Second
	)
	token := randHex(32)
	target := testkit.NewTarget(t, testkit.Always(http.StatusNoContent))
	cfg := filepath.Join(t.TempDir(), "hookgate.yaml")
	writeFile(t, cfg, `senders:
  - name: orders
    preset: generic
    delivery_id: { header: X-Delivery-Id }
    forward:
      - name: host
        url: `+target.URL+`
        signing_secret: ${ORDERS_SIGNING_SECRET}
`)
	addr := freeAddr(t)
	base := "http://" + addr

	args := append([]string{"run"}, e.runFlags(name)...)
	args = append(args,
		"-v", cfg+":"+configPath+":ro",
		"-e", "DATABASE_URL="+dsn,
		"-e", "HOOKGATE_ADDR="+addr,
		"-e", "HOOKGATE_ADMIN_TOKEN="+token,
		"-e", "ORDERS_SIGNING_SECRET="+signing,
		"-e", "HOOKGATE_SHUTDOWN_TIMEOUT="+shutdown.String(),
		image) // the image's own command: serve
	logs := &lockedBuffer{}
	cmd := exec.Command(e.bin, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		e.remove(name)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("container log:\n%s", logs.String())
		}
	})

	client := &http.Client{Timeout: 10 * time.Second}
	testkit.Poll(t, time.Minute, "GET /readyz answers 200", func() bool {
		select {
		case <-exited:
			t.Fatalf("the container exited before it was ready: %v\n%s", waitErr, logs.String())
		default:
		}
		return status(client, base+"/readyz") == http.StatusOK
	})
	if s := status(client, base+"/healthz"); s != http.StatusOK {
		t.Errorf("GET /healthz: %d, want 200", s)
	}

	t.Run("non-root, read-only root", func(t *testing.T) {
		pid := strings.TrimSpace(string(e.run(t, "inspect", "--format", "{{.State.Pid}}", name)))
		procStatus, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			t.Fatalf("the container's process: %v", err)
		}
		for line := range strings.Lines(string(procStatus)) {
			if f := strings.Fields(line); len(f) >= 2 && (f[0] == "Uid:" || f[0] == "Gid:") {
				if f[1] != imageUID {
					t.Errorf("the container's process runs with %s %s, want %s", f[0], f[1], imageUID)
				}
			}
		}
		if !rootReadOnly(t, "/proc/"+pid+"/mountinfo") {
			t.Error("the container's root file system is not mounted read-only")
		}
	})

	// A delivery, and its retry.
	post := func() (int, http.Header, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/orders", strings.NewReader(`{"order":42}`))
		req.Header.Set("X-Delivery-Id", "d1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	st, _, first := post()
	if st != http.StatusAccepted {
		t.Fatalf("first delivery: %d %s, want 202", st, first)
	}
	var accepted struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal([]byte(first), &accepted); err != nil || accepted.EventID == "" {
		t.Fatalf("first delivery's body %q: %v", first, err)
	}
	st, h, again := post()
	if st != http.StatusAccepted || h.Get("Idempotent-Replayed") != "true" || again != first {
		t.Errorf("retry: %d, Idempotent-Replayed %q, body %q; want 202, true and the first body %q", st, h.Get("Idempotent-Replayed"), again, first)
	}

	// The forward reached the target on the host, signed with the secret
	// from the environment, and the operator API (the admin token from the
	// environment) says it was delivered.
	testkit.Poll(t, time.Minute, "the forward reaches the target", func() bool { return len(target.HitsFor(accepted.EventID)) > 0 })
	hit := target.HitsFor(accepted.EventID)[0]
	wh, err := standardwebhooks.NewWebhook(signing)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(hit.Body, hit.Header); err != nil {
		t.Errorf("the forward's signature: %v", err)
	}
	testkit.Poll(t, time.Minute, "the operator API shows the forward delivered", func() bool {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/senders/orders/deliveries/d1", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var d struct {
			Forwards []struct {
				State string `json:"state"`
			} `json:"forwards"`
		}
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&d) == nil &&
			len(d.Forwards) == 1 && d.Forwards[0].State == "delivered"
	})

	// SIGTERM (podman stop sends the image's stop signal, SIGTERM, and
	// would send SIGKILL after --time): a clean exit, status 0, within
	// the shutdown timeout.
	start := time.Now()
	e.run(t, "stop", "--time", "60", name)
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatal("the container did not exit within 2 minutes of podman stop")
	}
	took := time.Since(start)
	if waitErr != nil {
		t.Errorf("the container exited with %v after SIGTERM, want status 0", waitErr)
	}
	if took > shutdown {
		t.Errorf("the container took %s to stop after SIGTERM, more than its shutdown timeout %s", took, shutdown)
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Errorf("the container logged no \"stopped\" line")
	}
	t.Logf("stopped %s after SIGTERM (shutdown timeout %s)", took.Round(time.Millisecond), shutdown)
}

// rootReadOnly reports whether mountinfo (a /proc/PID/mountinfo) mounts /
// read-only.
func rootReadOnly(t *testing.T, mountinfo string) bool {
	t.Helper()
	f, err := os.Open(mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options …
		fields := strings.Fields(sc.Text())
		if len(fields) > 5 && fields[4] == "/" {
			return slices.Contains(strings.Split(fields[5], ","), "ro")
		}
	}
	t.Fatalf("%s has no mount at /", mountinfo)
	return false
}

func status(client *http.Client, url string) int {
	resp, err := client.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// emptyDB creates an empty database (not migrated) on the test server,
// drops it when the test ends, and returns its URL.
func emptyDB(t *testing.T) string {
	t.Helper()
	admin := pgtest.URL(t)
	dbName := fmt.Sprintf("hgt_image_%d_%s", os.Getpid(), randHex(4))
	adminExec := func(sql string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	adminExec("CREATE DATABASE " + pgx.Identifier{dbName}.Sanitize())
	t.Cleanup(func() { adminExec("DROP DATABASE IF EXISTS " + pgx.Identifier{dbName}.Sanitize() + " WITH (FORCE)") })
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse %s: %v", pgtest.EnvURL, err)
	}
	u.Path, u.RawPath = "/"+dbName, ""
	return u.String()
}

// freeAddr returns 127.0.0.1:<port> for a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
