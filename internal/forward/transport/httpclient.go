package transport

import (
	"net"
	"net/http"
	"time"
)

// NewHTTPClient returns the HTTP client of forwards to any host. It keeps
// up to maxIdlePerHost idle connections to each target.
func NewHTTPClient(maxIdlePerHost int) *http.Client {
	return NewGuardedHTTPClient(maxIdlePerHost, nil)
}

// NewGuardedHTTPClient is [NewHTTPClient] connecting only where allowed
// permits. A proxy from the environment must be allowed too, since the
// client connects to it.
func NewGuardedHTTPClient(maxIdlePerHost int, allowed *AllowedHosts) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:         allowed.DialContext(&net.Dialer{}),
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConnsPerHost: maxIdlePerHost,
			IdleConnTimeout:     90 * time.Second,
			// The answer's body is discarded, so gzip would only cost.
			DisableCompression: true,
			// A target's headers are read whole and an attempt keeps
			// some of them: 64 KiB, not net/http's 10 MB.
			MaxResponseHeaderBytes: 64 << 10,
		},
		// A redirect is an answer, which fails the forward.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
