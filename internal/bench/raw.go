package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"
)

// rawClient is a minimal HTTP/1.1 keep-alive client for one connection
// (-client raw): it writes a request built from a template in one write and
// parses just the status, Content-Length, Transfer-Encoding, Connection and
// Idempotent-Replayed of the answer. It sends the same header fields as the
// net/http client, and costs a fraction of its CPU, which matters when the
// load generator shares the machine with what it measures.
type rawClient struct {
	addr   string
	head   []byte // request line and fixed headers, up to "X-Delivery-Id: "
	body   []byte
	conn   net.Conn
	br     *bufio.Reader
	wbuf   []byte
	status int
	// replayed is the Idempotent-Replayed value of the last answer.
	replayed []byte
}

func newRawClient(rawURL string, body []byte) (*rawClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	head := "POST " + u.RequestURI() + " HTTP/1.1\r\n" +
		"Host: " + u.Host + "\r\n" +
		"User-Agent: hookgate-bench/1.0\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"Content-Type: application/json\r\n" +
		"X-Event-Type: order.created\r\n" +
		"Accept-Encoding: gzip\r\n" +
		"X-Delivery-Id: "
	return &rawClient{addr: u.Host, head: []byte(head), body: body}, nil
}

func (c *rawClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// do sends a delivery with ID id and reads the answer; on any error the
// connection is closed (the next call dials again). snippet is the start of
// a non-202 answer's body.
func (c *rawClient) do(id []byte) (snippet []byte, err error) {
	if c.conn == nil {
		conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(context.Background(), "tcp", c.addr)
		if err != nil {
			return nil, err
		}
		c.conn = conn
		if c.br == nil {
			c.br = bufio.NewReaderSize(conn, 4096)
		} else {
			c.br.Reset(conn)
		}
	}
	c.wbuf = append(c.wbuf[:0], c.head...)
	c.wbuf = append(c.wbuf, id...)
	c.wbuf = append(c.wbuf, "\r\n\r\n"...)
	c.wbuf = append(c.wbuf, c.body...)
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.conn.Write(c.wbuf); err != nil {
		c.close()
		return nil, err
	}
	snippet, err = c.readResponse()
	if err != nil {
		c.close()
	}
	return snippet, err
}

var (
	hdrContentLength    = []byte("content-length")
	hdrTransferEncoding = []byte("transfer-encoding")
	hdrConnection       = []byte("connection")
	hdrReplayed         = []byte("idempotent-replayed")
)

func (c *rawClient) readResponse() (snippet []byte, err error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	// "HTTP/1.1 202 Accepted\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return nil, fmt.Errorf("malformed status line %q", line)
	}
	c.status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return nil, fmt.Errorf("malformed status line %q", line)
	}
	length, chunked, closeConn := -1, false, false
	c.replayed = c.replayed[:0]
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, fmt.Errorf("malformed header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, hdrContentLength):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return nil, fmt.Errorf("malformed Content-Length %q", value)
			}
		case bytes.EqualFold(name, hdrTransferEncoding):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, hdrConnection):
			closeConn = bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, hdrReplayed):
			c.replayed = append(c.replayed, value...)
		}
	}
	var body io.Reader
	switch {
	case chunked:
		body = &chunkedReader{br: c.br}
	case length >= 0:
		body = io.LimitReader(c.br, int64(length))
	default:
		return nil, errors.New("answer without Content-Length")
	}
	if c.status != 202 {
		snippet, _ = io.ReadAll(io.LimitReader(body, 300))
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return nil, err
	}
	if closeConn {
		c.close()
	}
	return snippet, nil
}

// chunkedReader decodes a chunked body (without trailers).
type chunkedReader struct {
	br   *bufio.Reader
	left int
	done bool
}

func (r *chunkedReader) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	if r.left == 0 {
		line, err := r.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(size), 16, 32)
		if err != nil {
			return 0, fmt.Errorf("malformed chunk size %q", line)
		}
		if n == 0 {
			r.done = true
			_, err := r.br.ReadSlice('\n') // the final CRLF
			if err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		r.left = int(n)
	}
	n, err := r.br.Read(p[:min(len(p), r.left)])
	r.left -= n
	if r.left == 0 && err == nil {
		if _, err := r.br.Discard(2); err != nil {
			return n, err
		}
	}
	return n, err
}
