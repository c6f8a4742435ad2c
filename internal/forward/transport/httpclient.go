package transport

import (
	"net"
	"net/http"
	"time"
)

// idleTimeout is how long an idle connection to a target is kept.
const idleTimeout = 90 * time.Second

// maxResponseHeaderBytes bounds a target's response headers. They are read
// whole and an attempt keeps some of them: 64 KiB, not net/http's 10 MB.
const maxResponseHeaderBytes = 64 << 10

// NewHTTPClient returns the HTTP client of forwards to any host. It keeps
// up to maxIdlePerHost idle connections to each target.
func NewHTTPClient(maxIdlePerHost int) *http.Client {
	return NewGuardedHTTPClient(maxIdlePerHost, nil)
}

// NewGuardedHTTPClient is [NewHTTPClient] connecting only where allowed
// permits. A proxy from the environment must be allowed too, since the
// client connects to it.
//
// [HTTP] posts through the client's own connections where no proxy
// applies ([direct]), and through net/http's Transport otherwise. The
// client's CloseIdleConnections closes both's.
func NewGuardedHTTPClient(maxIdlePerHost int, allowed *AllowedHosts) *http.Client {
	dial := allowed.DialContext(&net.Dialer{})
	return &http.Client{
		Transport: &guardedTransport{
			Transport: &http.Transport{
				DialContext:         dial,
				Proxy:               http.ProxyFromEnvironment,
				MaxIdleConnsPerHost: maxIdlePerHost,
				IdleConnTimeout:     idleTimeout,
				// The answer's body is discarded, so gzip would only cost.
				DisableCompression:     true,
				MaxResponseHeaderBytes: maxResponseHeaderBytes,
			},
			direct: newDirect(dial, maxIdlePerHost, idleTimeout, maxResponseHeaderBytes),
		},
		// A redirect is an answer, which fails the forward.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// guardedTransport is net/http's Transport with the connections of
// [direct] beside it, for [HTTP] to use.
type guardedTransport struct {
	*http.Transport
	direct *direct
}

// CloseIdleConnections closes the idle connections of both.
func (g *guardedTransport) CloseIdleConnections() {
	g.Transport.CloseIdleConnections()
	g.direct.closeIdle()
}
