package brokertest

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// NATS is a nats-server with JetStream, private to a test.
type NATS struct {
	t    testing.TB
	bin  string
	port int
	dir  string

	mu sync.Mutex
	p  *process
}

// StartNATS starts a nats-server with JetStream (its store in a
// temporary directory) on a free port of 127.0.0.1, killed when the test
// ends.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	n := &NATS{t: t, bin: binary(t, "nats-server", "nats-server", "/usr/sbin/nats-server", "/usr/bin/nats-server"), port: freePort(t), dir: t.TempDir()}
	n.Start()
	t.Cleanup(n.Stop)
	return n
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
	n.p = start(n.t, logFile, nil, n.bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(n.port),
		"-sd", filepath.Join(n.dir, "store"), "-n", "hookgate-test")
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
