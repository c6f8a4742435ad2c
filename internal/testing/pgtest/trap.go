package pgtest

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// PasswordTrap is a TCP listener on 127.0.0.1 that speaks just enough of
// PostgreSQL's protocol to ask every client for its password in clear
// (AuthenticationCleartextPassword: message 'R', code 3) and to record
// what arrives: a host that pg_dist_node might name and that is not the
// worker it claims to be. With a certificate it accepts TLS (it answers
// an SSLRequest 'S'); without, it declines it ('N'), as a server without
// TLS does. Every client ends with a FATAL authentication error.
type PasswordTrap struct {
	// Addr is where it listens, 127.0.0.1:port.
	Addr string

	l    net.Listener
	cert *tls.Certificate
	wg   sync.WaitGroup

	conns connSet

	mu        sync.Mutex
	accepted  int
	passwords []TrappedPassword
}

// TrappedPassword is a password a client sent a PasswordTrap.
type TrappedPassword struct {
	Password string
	TLS      bool // it came over TLS
}

// trapTimeout bounds each connection of a PasswordTrap.
const trapTimeout = time.Minute

// NewPasswordTrap starts a PasswordTrap, accepting TLS with cert when it
// is not nil; it is closed when the test ends.
func NewPasswordTrap(t testing.TB, cert *tls.Certificate) *PasswordTrap {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: password trap: %v", err)
	}
	p := &PasswordTrap{Addr: l.Addr().String(), l: l, cert: cert}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Connections returns how many connections the trap has accepted.
func (p *PasswordTrap) Connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Passwords returns the passwords the trap was sent, in order.
func (p *PasswordTrap) Passwords() []TrappedPassword {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]TrappedPassword(nil), p.passwords...)
}

func (p *PasswordTrap) close() {
	_ = p.l.Close()
	p.conns.closeAll()
	p.wg.Wait()
}

func (p *PasswordTrap) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.conns.add(c) {
			_ = c.Close()
			return
		}
		p.mu.Lock()
		p.accepted++
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

// The codes of the startup packets that are requests, not a startup message.
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
)

// serve asks the client on c for its password and records it.
func (p *PasswordTrap) serve(c net.Conn) {
	defer p.wg.Done()
	defer func() {
		_ = c.Close()
		p.conns.remove(c)
	}()
	_ = c.SetDeadline(time.Now().Add(trapTimeout))
	conn := c
	secure := false
	for {
		body, err := readStartup(conn)
		if err != nil || len(body) < 4 {
			return
		}
		code := binary.BigEndian.Uint32(body)
		if code != sslRequestCode && code != gssEncRequestCode {
			break // a startup message
		}
		if code == gssEncRequestCode || p.cert == nil || secure {
			if _, err := conn.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		}
		if _, err := conn.Write([]byte{'S'}); err != nil {
			return
		}
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*p.cert}, MinVersion: tls.VersionTLS12})
		ctx, cancel := context.WithTimeout(context.Background(), trapTimeout)
		err = tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return
		}
		conn, secure = tc, true
	}
	// AuthenticationCleartextPassword.
	if _, err := conn.Write([]byte{'R', 0, 0, 0, 8, 0, 0, 0, 3}); err != nil {
		return
	}
	r := bufio.NewReader(conn)
	typ, err := r.ReadByte()
	if err != nil || typ != 'p' {
		return
	}
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil || n < 5 || n > 1<<16 {
		return
	}
	msg := make([]byte, n-4)
	if _, err := io.ReadFull(r, msg); err != nil {
		return
	}
	if i := len(msg) - 1; i >= 0 && msg[i] == 0 {
		msg = msg[:i]
	}
	p.mu.Lock()
	p.passwords = append(p.passwords, TrappedPassword{Password: string(msg), TLS: secure})
	p.mu.Unlock()
	fatal := "SFATAL\x00VFATAL\x00C28P01\x00Mpassword authentication failed\x00\x00"
	e := []byte{'E', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(e[1:], uint32(4+len(fatal)))
	_, _ = conn.Write(append(e, fatal...))
}

// readStartup reads one startup packet (a length, then that many bytes
// with the length's own four) and returns what follows the length.
func readStartup(r io.Reader) ([]byte, error) {
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return nil, err
	}
	if n < 8 || n > 1<<16 {
		return nil, io.ErrUnexpectedEOF
	}
	b := make([]byte, n-4)
	_, err := io.ReadFull(r, b)
	return b, err
}

// WithPassword returns the URL dsn with the password password and the
// query parameters params (sslmode, sslrootcert, …) set: a DATABASE_URL
// whose password the test server (which trusts local connections) never
// asks for, and a password trap would record.
func WithPassword(t testing.TB, dsn, password string, params url.Values) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("pgtest: parse DSN: %v", err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	q := u.Query()
	for k, v := range params {
		q[k] = v
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// TestCA is a certificate authority made for a test.
type TestCA struct {
	// File holds the CA's certificate (PEM): a DATABASE_URL's sslrootcert.
	File string

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewTestCA makes a CA whose certificate is in a file of the test's
// temporary directory.
func NewTestCA(t testing.TB) *TestCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pgtest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &TestCA{File: path, cert: cert, key: key}
}

// Cert returns a server certificate for hosts (names or addresses) signed
// by ca.
func (ca *TestCA) Cert(t testing.TB, hosts ...string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	leaf := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key}
}
