package pgtest

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// connSet is the open connections of a test's server, closed at once at
// its end.
type connSet struct {
	mu     sync.Mutex
	open   map[net.Conn]struct{}
	closed bool
}

// add adds c, or returns false once closeAll has run.
func (s *connSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.open == nil {
		s.open = map[net.Conn]struct{}{}
	}
	s.open[c] = struct{}{}
	return true
}

// remove forgets c (closed by its owner).
func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, c)
}

// closeAll closes every connection added, and any added later.
func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.open {
		_ = c.Close()
	}
	s.open = nil
}

// CutProxy is a TCP proxy in front of PostgreSQL that relays the protocol
// unchanged until it is armed (ArmCommitCut). Armed, it cuts the next
// connection that sends a COMMIT the way a network failure at the worst
// moment would: the COMMIT reaches the server and is carried out, and its
// answer never reaches the client, whose connection is closed. The client
// cannot know whether its transaction committed.
type CutProxy struct {
	t      testing.TB
	l      net.Listener
	target string
	armed  atomic.Bool
	cuts   atomic.Int32
	wg     sync.WaitGroup
	conns  connSet
}

// NewCutProxy starts a proxy in front of the server of dsn (a postgres://
// URL on TCP) and returns it and the DSN that connects through it (with
// sslmode=disable: the proxy reads the protocol). It is closed when the test
// ends.
func NewCutProxy(t testing.TB, dsn string) (*CutProxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("pgtest: cut proxy: parse DSN: %v", err)
	}
	target := u.Host
	if !strings.Contains(target, ":") {
		target += ":5432"
	}
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: cut proxy: %v", err)
	}
	p := &CutProxy{t: t, l: l, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	u.Host = l.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return p, u.String()
}

// ArmCommitCut makes the proxy cut the next connection that sends COMMIT
// (a simple query, or the execution of a statement prepared as COMMIT),
// once the server has answered the COMMIT.
func (p *CutProxy) ArmCommitCut() { p.armed.Store(true) }

// Cuts returns how many connections the proxy has cut after a COMMIT.
func (p *CutProxy) Cuts() int { return int(p.cuts.Load()) }

func (p *CutProxy) close() {
	_ = p.l.Close()
	p.conns.closeAll()
	p.wg.Wait()
}

func (p *CutProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		server, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.conns.add(client) || !p.conns.add(server) {
			_ = client.Close()
			_ = server.Close()
			return
		}
		c := &proxied{p: p, client: client, server: server, prepared: map[string]string{}}
		p.wg.Add(2)
		go c.up()
		go c.down()
	}
}

// proxied is one client connection and its server connection.
type proxied struct {
	p              *CutProxy
	client, server net.Conn
	prepared       map[string]string // statement name → SQL (up's own)
	cut            atomic.Bool       // the COMMIT went up: withhold everything coming down
	closeOnce      sync.Once
}

func (c *proxied) closeBoth() {
	c.closeOnce.Do(func() {
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// up relays the client's messages to the server, noting statements
// prepared as COMMIT, and arming the cut when COMMIT is sent while the
// proxy is armed.
func (c *proxied) up() {
	defer c.p.wg.Done()
	defer c.closeBoth()
	r := bufio.NewReader(c.client)
	// The startup message has no type byte.
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return
	}
	size := int(binary.BigEndian.Uint32(n[:]))
	if size < 4 || size > 1<<20 {
		return
	}
	startup := make([]byte, size)
	copy(startup, n[:])
	if _, err := io.ReadFull(r, startup[4:]); err != nil {
		return
	}
	if _, err := c.server.Write(startup); err != nil {
		return
	}
	for {
		typ, msg, err := readMessage(r)
		if err != nil {
			return
		}
		body := msg[5:]
		switch typ {
		case 'P': // Parse: name, query
			name, rest := cstring(body)
			query, _ := cstring(rest)
			c.prepared[name] = query
		case 'B': // Bind: portal, statement
			_, rest := cstring(body)
			stmt, _ := cstring(rest)
			if isCommit(c.prepared[stmt]) && c.p.armed.CompareAndSwap(true, false) {
				c.cut.Store(true)
			}
		case 'Q': // Query
			query, _ := cstring(body)
			if isCommit(query) && c.p.armed.CompareAndSwap(true, false) {
				c.cut.Store(true)
			}
		}
		if _, err := c.server.Write(msg); err != nil {
			return
		}
	}
}

// down relays the server's messages to the client until the cut; after
// it, it withholds them, and closes both connections once the server has
// answered the COMMIT (with COMMIT, or ROLLBACK for an aborted
// transaction).
func (c *proxied) down() {
	defer c.p.wg.Done()
	defer c.closeBoth()
	r := bufio.NewReader(c.server)
	for {
		typ, msg, err := readMessage(r)
		if err != nil {
			return
		}
		if !c.cut.Load() {
			if _, err := c.client.Write(msg); err != nil {
				return
			}
			continue
		}
		if typ == 'C' { // CommandComplete
			tag, _ := cstring(msg[5:])
			if tag == "COMMIT" || tag == "ROLLBACK" {
				c.p.cuts.Add(1)
				return
			}
		}
	}
}

// readMessage reads one protocol message (type byte, length, body) and
// returns its type and all of its bytes.
func readMessage(r *bufio.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	size := int(binary.BigEndian.Uint32(head[1:]))
	if size < 4 || size > 1<<30 {
		return 0, nil, fmt.Errorf("message %q of %d bytes", head[0], size)
	}
	msg := make([]byte, 1+size)
	copy(msg, head[:])
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return 0, nil, err
	}
	return head[0], msg, nil
}

// cstring splits b at its first NUL.
func cstring(b []byte) (string, []byte) {
	i := 0
	for i < len(b) && b[i] != 0 {
		i++
	}
	if i == len(b) {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

func isCommit(sql string) bool {
	return strings.EqualFold(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(sql), ";")), "COMMIT")
}
