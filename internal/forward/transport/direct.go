package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// direct posts forwards over HTTP/1.1 keep-alive connections of its own,
// on the caller's goroutine. net/http's Transport runs two goroutines per
// connection and hands every request and answer between them and the
// caller; a forward's POST paid about a third of its CPU for that and
// for the garbage of its types. direct writes the request itself and
// reads the answer with net/http's own parser ([http.ReadResponse]), so
// what reaches the target and what is read from it is parsed as before.
//
// It serves the targets that [HTTP] can reach without a proxy, over http
// or https with an ASCII host. The others go through net/http. It speaks
// HTTP/1.1 only: over TLS it offers no h2.
//
// A request runs under its context: its end, by its deadline or a
// cancellation, ends the reads and writes under way. A connection
// reused from the pool that fails before the first byte of an answer is
// sent again, once, on a connection dialed anew, as net/http retries a
// request that carries an Idempotency-Key: the target may have closed it
// while idle, and the pool's others with it. Every forward carries one.
type direct struct {
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
	tlsConfig      *tls.Config // the base of each target's, or nil
	maxIdle        int         // idle connections kept per host
	idleTimeout    time.Duration
	maxHeaderBytes int64

	mu       sync.Mutex
	idle     map[string][]*directConn // by directTarget.key, oldest first
	sweeping bool                     // a sweep of idle connections is due
}

// directConn is one connection, used by one request at a time.
type directConn struct {
	nc        net.Conn
	lr        io.LimitedReader // nc, limited while an answer's head is read
	br        *bufio.Reader    // lr's
	bw        *bufio.Writer    // nc's
	idleSince time.Time
	reused    bool
}

// directTarget is what direct needs of a target's URL, worked out once.
type directTarget struct {
	key  string // the pool's key: scheme and address
	addr string // host:port to dial
	tls  *tls.Config
	head string // "POST <request URI> HTTP/1.1\r\nHost: <host>\r\n"
}

func newDirect(dial func(ctx context.Context, network, addr string) (net.Conn, error), maxIdle int, idleTimeout time.Duration, maxHeaderBytes int64) *direct {
	return &direct{dial: dial, maxIdle: max(maxIdle, 1), idleTimeout: idleTimeout, maxHeaderBytes: maxHeaderBytes, idle: map[string][]*directConn{}}
}

// target returns how direct reaches u, or nil when it leaves u to net/http:
// another scheme, a proxy from the environment, a host that is not plain
// ASCII or has an IPv6 zone.
func (d *direct) target(u *url.URL) *directTarget {
	if d == nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil {
		return nil
	}
	for i := 0; i < len(u.Host); i++ {
		if c := u.Host[i]; c <= ' ' || c >= 0x7f || c == '%' || c == '/' {
			return nil
		}
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || p != nil {
		return nil
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	t := &directTarget{addr: net.JoinHostPort(host, port)}
	t.key = u.Scheme + "://" + t.addr
	if u.Scheme == "https" {
		t.tls = &tls.Config{}
		if d.tlsConfig != nil {
			t.tls = d.tlsConfig.Clone()
		}
		t.tls.ServerName, t.tls.NextProtos = host, []string{"http/1.1"}
	}
	t.head = "POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n"
	return t
}

// excluded are the headers that the request's framing sets, as net/http
// leaves them out of a request's header map.
var excluded = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true}

// post sends a POST with hd and body to t, by deadline and within ctx. It
// returns the answer's status and headers, and the first MaxKeptBody
// bytes of its body, the rest read and discarded up to maxResponseBytes.
// A send that ran out of time returns [context.DeadlineExceeded], and one
// whose ctx ended returns ctx's error.
func (d *direct) post(ctx context.Context, deadline time.Time, t *directTarget, hd http.Header, body []byte) (int, http.Header, []byte, error) {
	closeAfter := false
	for k, vs := range hd {
		if !httpguts.ValidHeaderFieldName(k) {
			return 0, nil, nil, fmt.Errorf("invalid header field %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return 0, nil, nil, fmt.Errorf("invalid header field %q", k)
			}
		}
		if k == "Connection" && httpguts.HeaderValuesContainsToken(vs, "close") {
			closeAfter = true
		}
	}
	for try := 0; ; try++ {
		// A retry dials: the pool's other connections to t may have been
		// closed by the target too.
		c, err := d.get(ctx, deadline, t, try == 0)
		if err != nil {
			return 0, nil, nil, err
		}
		status, header, kept, keep, fresh, err := d.roundTrip(ctx, deadline, c, t, hd, body)
		if err == nil {
			if keep && !closeAfter {
				d.put(t.key, c)
			} else {
				_ = c.nc.Close()
			}
			return status, header, kept, nil
		}
		_ = c.nc.Close()
		if ctx.Err() != nil {
			return 0, nil, nil, ctx.Err()
		}
		if !time.Now().Before(deadline) {
			return 0, nil, nil, context.DeadlineExceeded
		}
		if !c.reused || !fresh || try > 0 {
			return 0, nil, nil, err
		}
	}
}

// aLongTimeAgo is a deadline that ends every read and write at once.
var aLongTimeAgo = time.Unix(1, 0)

// postRequest is what http.ReadResponse is told of the request: a POST.
var postRequest = &http.Request{Method: http.MethodPost}

// roundTrip writes the request on c and reads the answer. keep reports
// that c may serve another request: the answer's body was read to its
// end, and the answer does not close the connection. fresh reports, with
// an error, that no byte of an answer was read.
func (d *direct) roundTrip(ctx context.Context, deadline time.Time, c *directConn, t *directTarget, hd http.Header, body []byte) (status int, header http.Header, kept []byte, keep, fresh bool, err error) {
	// The deadline is the connection's: its reads and writes end there.
	// The context's end ends them too. A connection whose deadline ctx's
	// end set is not reused.
	if err := c.nc.SetDeadline(deadline); err != nil {
		return 0, nil, nil, false, true, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() {
			keep = false // the deadline may be past
		}
	}()

	w := c.bw
	_, _ = w.WriteString(t.head)
	for k, vs := range hd {
		if excluded[k] {
			continue
		}
		for _, v := range vs {
			_, _ = w.WriteString(k)
			_, _ = w.WriteString(": ")
			_, _ = w.WriteString(textproto.TrimString(v))
			_, _ = w.WriteString("\r\n")
		}
	}
	_, _ = w.WriteString("Content-Length: ")
	var n [20]byte
	_, _ = w.Write(strconv.AppendInt(n[:0], int64(len(body)), 10))
	_, _ = w.WriteString("\r\n\r\n")
	_, _ = w.Write(body)
	if err := w.Flush(); err != nil {
		return 0, nil, nil, false, true, err
	}

	c.lr.N = d.maxHeaderBytes
	var resp *http.Response
	for informational := 0; ; informational++ {
		resp, err = http.ReadResponse(c.br, postRequest) //nolint:bodyclose // read below to its end or its bound; an unfinished body closes the connection instead
		if err != nil {
			fresh = c.lr.N == d.maxHeaderBytes && c.br.Buffered() == 0
			if c.lr.N <= 0 {
				err = fmt.Errorf("the target's response headers exceeded %d bytes", d.maxHeaderBytes)
			}
			return 0, nil, nil, false, fresh, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if informational == 5 { // as net/http
			return 0, nil, nil, false, false, errors.New("the target sent too many 1xx answers")
		}
		c.lr.N = d.maxHeaderBytes
	}
	c.lr.N = math.MaxInt64
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return 0, nil, nil, false, false, errors.New("the target switched protocols (101) in answer to a POST")
	}
	// The body is read here, to its end or to the bound, and not closed:
	// closing an unfinished one would read it to its end. Its connection
	// is closed instead.
	kept, clean := readAnswer(resp.Body)
	// Bytes after the answer are none that this connection can read as
	// the next answer, as net/http's "unsolicited response".
	clean = clean && !resp.Close && c.br.Buffered() == 0
	return resp.StatusCode, resp.Header, kept, clean, false, nil
}

// readAnswer reads body: it keeps the first MaxKeptBody bytes and discards
// the rest, up to maxResponseBytes. clean reports that the body ended
// there, so that its connection may be reused.
func readAnswer(body io.Reader) (kept []byte, clean bool) {
	if body == http.NoBody {
		return nil, true
	}
	bp := keptBuffers.Get().(*[]byte)
	defer keptBuffers.Put(bp)
	buf := *bp
	n := 0
	var err error
	for n < len(buf) && err == nil {
		var k int
		k, err = body.Read(buf[n:])
		n += k
	}
	if err == nil { // the buffer is full: discard the rest
		rest := int64(maxResponseBytes - len(buf))
		var m int64
		m, err = io.Copy(io.Discard, io.LimitReader(body, rest+1))
		if err == nil {
			err = io.EOF
			if m > rest {
				err = errors.New("longer than read")
			}
		}
	}
	if n > 0 {
		kept = append([]byte(nil), buf[:n]...)
	}
	return kept, errors.Is(err, io.EOF)
}

// get returns an idle connection to t, the most recently used, when
// pooled, or else a new one, dialed by deadline.
func (d *direct) get(ctx context.Context, deadline time.Time, t *directTarget, pooled bool) (*directConn, error) {
	now := time.Now()
	d.mu.Lock()
	for cs := d.idle[t.key]; pooled && len(cs) > 0; cs = d.idle[t.key] {
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		d.idle[t.key] = cs[:len(cs)-1]
		if now.Sub(c.idleSince) < d.idleTimeout {
			d.mu.Unlock()
			c.reused = true
			return c, nil
		}
		_ = c.nc.Close()
	}
	d.mu.Unlock()

	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := d.dial(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	if t.tls != nil {
		tc := tls.Client(nc, t.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	c := &directConn{nc: nc, bw: bufio.NewWriterSize(nc, 4096)}
	c.lr.R = nc
	c.br = bufio.NewReaderSize(&c.lr, 4096)
	return c, nil
}

// put returns c to the pool of key, unless the pool is full.
func (d *direct) put(key string, c *directConn) {
	c.idleSince = time.Now()
	d.mu.Lock()
	cs := d.idle[key]
	if len(cs) >= d.maxIdle {
		d.mu.Unlock()
		_ = c.nc.Close()
		return
	}
	d.idle[key] = append(cs, c)
	if !d.sweeping {
		d.sweeping = true
		time.AfterFunc(d.idleTimeout, d.sweep)
	}
	d.mu.Unlock()
}

// sweep closes the connections idle for idleTimeout, and comes back while
// any are left.
func (d *direct) sweep() {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, cs := range d.idle {
		i := 0
		for i < len(cs) && now.Sub(cs[i].idleSince) >= d.idleTimeout {
			_ = cs[i].nc.Close()
			i++
		}
		if i == len(cs) {
			delete(d.idle, key)
			continue
		}
		d.idle[key] = append(cs[:0], cs[i:]...)
	}
	d.sweeping = len(d.idle) > 0
	if d.sweeping {
		time.AfterFunc(d.idleTimeout/2, d.sweep)
	}
}

// closeIdle closes every idle connection.
func (d *direct) closeIdle() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, cs := range d.idle {
		for _, c := range cs {
			_ = c.nc.Close()
		}
		delete(d.idle, key)
	}
}
