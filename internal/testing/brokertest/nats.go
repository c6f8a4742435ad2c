package brokertest

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// NATS is a nats-server with JetStream, private to a test.
type NATS struct {
	t       testing.TB
	bin     string
	port    int
	monitor int // the monitoring port (StartNATSCluster's), 0 for none
	dir     string
	args    []string // besides the address, port and name

	mu sync.Mutex
	p  *process
}

// natsBinary is the nats-server to run.
func natsBinary(t testing.TB) string {
	return binary(t, "nats-server", "nats-server", "/usr/sbin/nats-server", "/usr/bin/nats-server")
}

// StartNATS starts a nats-server with JetStream (its store in a
// temporary directory) on a free port of 127.0.0.1, killed when the test
// ends.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	n := &NATS{t: t, bin: natsBinary(t), port: freePort(t), dir: t.TempDir()}
	n.args = []string{"-js", "-sd", filepath.Join(n.dir, "store")}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// StartNATSCluster starts two nats-servers (without JetStream) on free
// ports of 127.0.0.1 that form one cluster and take the clients that give
// token; each tells its clients of the other (the connect_urls of its
// INFO, which a client adds to its servers unless it ignores discovered
// servers). It returns once their route is up; both are killed when the
// test ends. Each has a monitoring port (ClientNames).
func StartNATSCluster(t testing.TB, token string) (a, b *NATS) {
	t.Helper()
	bin := natsBinary(t)
	routes := [2]int{freePort(t), freePort(t)}
	ns := [2]*NATS{}
	for i := range ns {
		n := &NATS{t: t, bin: bin, port: freePort(t), monitor: freePort(t), dir: t.TempDir()}
		n.args = []string{"--auth", token, "-m", strconv.Itoa(n.monitor), "--cluster_name", "hookgate-test",
			"--cluster", "nats://127.0.0.1:" + strconv.Itoa(routes[i]), "--routes", "nats://127.0.0.1:" + strconv.Itoa(routes[1-i])}
		n.Start()
		t.Cleanup(n.Stop)
		ns[i] = n
	}
	deadline := time.Now().Add(30 * time.Second)
	for ns[0].routes() < 1 || ns[1].routes() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("brokertest: the two NATS servers did not form a cluster within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ns[0], ns[1]
}

// monitoring GETs path of the server's monitoring port into v; false when
// the server does not answer.
func (n *NATS) monitoring(path string, v any) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(n.monitor)+path, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(v) == nil
}

// routes is how many routes to other servers of its cluster the server
// has (0 when it does not answer).
func (n *NATS) routes() int {
	var r struct {
		NumRoutes int `json:"num_routes"`
	}
	n.monitoring("/routez", &r)
	return r.NumRoutes
}

// ClientNames returns the names of the clients connected to the server
// now, or also of those connected before (all) since it started; nil
// when it does not answer (stopped).
func (n *NATS) ClientNames(all bool) []string {
	state := "open"
	if all {
		state = "all"
	}
	var c struct {
		Connections []struct {
			Name string `json:"name"`
		} `json:"connections"`
	}
	if !n.monitoring("/connz?limit=1024&state="+state, &c) {
		return nil
	}
	names := []string{}
	for _, conn := range c.Connections {
		names = append(names, conn.Name)
	}
	return names
}

// URL is the server's client URL.
func (n *NATS) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

// Start starts the server (again, after Stop: on the same port, with the
// same store, as a restart).
func (n *NATS) Start() {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p != nil {
		return
	}
	logFile := filepath.Join(n.dir, fmt.Sprintf("nats-%d.log", time.Now().UnixNano()))
	n.p = start(n.t, logFile, nil, n.bin, append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(n.port),
		"-n", fmt.Sprintf("hookgate-test-%d", n.port)}, n.args...)...)
	waitPort(n.t, n.port, 30*time.Second, n.p.exited, logFile)
}

// Stop kills the server (SIGKILL: a crash; what JetStream had stored stays
// in its store for the next Start).
func (n *NATS) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.p.kill()
	n.p = nil
}

// JetStream returns a JetStream client of the server on a connection
// closed with the test.
func (n *NATS) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatalf("brokertest: connect to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
