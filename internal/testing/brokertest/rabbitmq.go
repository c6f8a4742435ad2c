package brokertest

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// RabbitMQ is a rabbitmq-server (with its own epmd) private to a test,
// whose guest user may connect from 127.0.0.1.
type RabbitMQ struct {
	t                  testing.TB
	bin, epmd          string
	port, dist, epPort int
	dir                string
	node               string

	mu       sync.Mutex
	p, epmdP *process
}

// StartRabbitMQ starts a rabbitmq-server on a free port of 127.0.0.1, its
// data in a temporary directory, killed when the test ends. It takes some
// seconds (an Erlang node boots).
func StartRabbitMQ(t testing.TB) *RabbitMQ {
	t.Helper()
	bin := binary(t, "rabbitmq-server", "rabbitmq-server", "/usr/lib/rabbitmq/bin/rabbitmq-server")
	epmd := binary(t, "epmd", "erlang-base", "/usr/bin/epmd", "/usr/lib/erlang/bin/epmd")
	r := &RabbitMQ{t: t, bin: bin, epmd: epmd, port: freePort(t), dist: freePort(t), epPort: freePort(t), dir: t.TempDir(),
		node: fmt.Sprintf("hgtest%d@localhost", time.Now().UnixNano()%1e9)}
	if err := os.WriteFile(filepath.Join(r.dir, "rabbitmq.conf"),
		fmt.Appendf(nil, "listeners.tcp.default = %d\nloopback_users = none\n", r.port), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "enabled_plugins"), []byte("[].\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.Start()
	t.Cleanup(r.close)
	return r
}

// URL is the broker's AMQP URL (its default virtual host; the user guest,
// RabbitMQ's default, is what a target without credentials connects as).
func (r *RabbitMQ) URL() string { return "amqp://127.0.0.1:" + strconv.Itoa(r.port) + "/" }

// Start starts the broker (again, after Stop: on the same port, with the
// same data, as a restart).
func (r *RabbitMQ) Start() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p != nil {
		return
	}
	stamp := time.Now().UnixNano()
	if r.epmdP == nil {
		epLog := filepath.Join(r.dir, fmt.Sprintf("epmd-%d.log", stamp))
		r.epmdP = start(r.t, epLog, nil, r.epmd, "-port", strconv.Itoa(r.epPort), "-address", "127.0.0.1")
		waitPort(r.t, r.epPort, 10*time.Second, r.epmdP.exited, epLog)
	}
	logFile := filepath.Join(r.dir, fmt.Sprintf("rabbitmq-%d.log", stamp))
	env := []string{
		"HOME=" + r.dir, // the Erlang cookie
		"RABBITMQ_NODENAME=" + r.node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(r.port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(r.dist),
		"ERL_EPMD_PORT=" + strconv.Itoa(r.epPort),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(r.dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(r.dir, "log"),
		"RABBITMQ_LOGS=-",
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(r.dir, "rabbitmq"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(r.dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE=" + filepath.Join(r.dir, "rabbitmq.pid"),
		// A crash dump goes with the broker's files, not into the test's
		// package directory (one was committed from there).
		"ERL_CRASH_DUMP=" + filepath.Join(r.dir, "erl_crash.dump"),
	}
	r.p = start(r.t, logFile, env, r.bin)
	waitPort(r.t, r.port, 90*time.Second, r.p.exited, logFile)
}

// Stop kills the broker (SIGKILL: a crash; persistent messages on durable
// queues stay for the next Start). Its epmd is killed at the test's end.
func (r *RabbitMQ) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p.kill()
	r.p = nil
}

// close kills the broker and its epmd.
func (r *RabbitMQ) close() {
	r.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.epmdP.kill()
	r.epmdP = nil
}

// Dial returns a connection to the broker (as guest), made as soon as the
// broker accepts one (within a minute of a Start), closed with the test.
func (r *RabbitMQ) Dial(t testing.TB) *amqp.Connection {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := amqp.Dial(r.URL())
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("brokertest: connect to RabbitMQ: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Bind declares, as a consumer does when it connects, a durable topic
// exchange, a durable queue, and the queue's binding to the exchange with
// key. Declaring them again (after a restart) changes nothing.
func (r *RabbitMQ) Bind(t testing.TB, exchange, queue, key string) {
	t.Helper()
	ch, err := r.Dial(t).Channel()
	if err != nil {
		t.Fatalf("brokertest: open a channel: %v", err)
	}
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("brokertest: declare exchange %s: %v", exchange, err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatalf("brokertest: declare queue %s: %v", queue, err)
	}
	if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		t.Fatalf("brokertest: bind queue %s: %v", queue, err)
	}
}
