package forward

import (
	"net"
	"net/http"
	"time"
)

// NewHTTPClient returns the HTTP client of forwards, keeping up to
// maxIdlePerHost idle connections to each target, to any host.
func NewHTTPClient(maxIdlePerHost int) *http.Client {
	return NewGuardedHTTPClient(maxIdlePerHost, nil)
}

// NewGuardedHTTPClient is NewHTTPClient connecting only where allowed
// permits (AllowedHosts.DialContext; a proxy from the environment is
// connected to, and so must be allowed, itself); a nil allowed permits
// every host. The fast path and River's worker share the client
// (WorkerConfig.Client).
func NewGuardedHTTPClient(maxIdlePerHost int, allowed *AllowedHosts) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:         allowed.DialContext(&net.Dialer{}),
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConnsPerHost: maxIdlePerHost,
			IdleConnTimeout:     90 * time.Second,
			// The target's answer is read only to reuse the connection (and
			// its status kept): asking for gzip would only add a header to
			// every forward and a decompressor to some answers.
			DisableCompression: true,
		},
		// A forward is a POST of one body to one URL: a redirect is an
		// answer (a failed forward), not an instruction.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
