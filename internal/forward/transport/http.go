package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hookgate/hookgate/internal/signature"
)

// maxResponseBytes is how much of a target's answer is read, the first
// [MaxKeptBody] bytes kept and the rest discarded, so that the connection
// can be reused.
const maxResponseBytes = 64 << 10

// HTTP is the [Transport] of HTTP targets. It posts a forward's body to
// the target's URL, with the identifying and signing headers, within the
// target's timeout. A 2xx is delivered. A 408, 429 or 5xx, a timeout and a
// connection error are retried. Another 4xx fails. Its methods are safe
// for concurrent use.
type HTTP struct {
	client *http.Client
	rt     http.RoundTripper // client's transport, when send may use it directly
	direct *direct           // client's own connections, when it has them
	now    func() time.Time  // the clock of timestamps and Retry-After dates
	urls   sync.Map          // the targets' *targetURL, by URL
}

// NewHTTP returns the transport that sends forwards with client, reading
// the time from now. Client is usually [NewGuardedHTTPClient]'s: then the
// forwards that need no proxy go over its own connections ([direct]).
func NewHTTP(client *http.Client, now func() time.Time) *HTTP {
	h := &HTTP{client: client, now: now}
	if client != nil && client.Transport != nil && client.Jar == nil && client.Timeout == 0 {
		h.rt = client.Transport
		if g, ok := client.Transport.(*guardedTransport); ok {
			h.direct = g.direct
		}
	}
	return h
}

// Send posts the forward once and classifies the outcome.
func (h *HTTP) Send(ctx context.Context, m Message) Sent {
	t := m.Target
	b := boundOf(ctx, m)
	u, err := h.targetURL(t.URL)
	if err != nil {
		return Sent{Verdict: VerdictFailed, Err: fmt.Errorf("build request for target %q: the URL does not parse", t.Name)}
	}
	hd := h.header(m)
	start := time.Now()
	deadline := start.Add(b.timeout)
	var (
		code    int
		header  http.Header
		kept    []byte
		expired bool
	)
	if u.direct != nil {
		// direct keeps to the deadline with its connection's own: a
		// context per send cost a timer and a registration with ctx.
		code, header, kept, err = h.direct.post(ctx, deadline, u.direct, hd, m.Body)
		expired = err != nil && !time.Now().Before(deadline)
	} else {
		rctx, cancel := context.WithDeadline(ctx, deadline)
		code, header, kept, err = h.roundTrip(newRequest(rctx, u.url, hd, m.Body))
		expired = rctx.Err() != nil
		cancel()
	}
	took := time.Since(start)
	if err != nil {
		// A *url.Error names the URL, which may hold credentials.
		// Keep only what went wrong.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		err = fmt.Errorf("post to target %q: %w", t.Name, err)
		if b.cutAt(expired) {
			return Sent{Verdict: VerdictNone, Err: err}
		}
		return Sent{Verdict: VerdictRetry, Err: err, Took: took}
	}

	switch {
	case code >= 200 && code < 300:
		return Sent{Verdict: VerdictDelivered, Status: code, At: h.now().UTC(), Took: took, Header: header, Body: kept}
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		e := &errStatus{status: code, retryAfter: parseRetryAfter(header.Get("Retry-After"), h.now())}
		return Sent{Verdict: VerdictRetry, Status: code, Err: e, RetryAfter: e.retryAfter, Took: took,
			PausesTarget: code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable,
			Header:       header, Body: kept}
	default:
		return Sent{Verdict: VerdictFailed, Status: code, Err: &errStatus{status: code}, Took: took, Header: header, Body: kept}
	}
}

// keptBuffers are the buffers that readAnswer reads into.
var keptBuffers = sync.Pool{New: func() any { b := make([]byte, MaxKeptBody); return &b }}

// header returns the forward's request headers. It fills the map with
// canonical keys and one backing array for the values, to save
// allocations.
func (h *HTTP) header(m Message) http.Header {
	t := m.Target
	// Up to 8 keys fit a map's first group; a larger hint allocates more.
	hd := make(http.Header, 8)
	vals := make([]string, 0, 9)
	set := func(k, v string) { // k canonical
		vals = append(vals, v)
		hd[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	for _, k := range [...]string{"Content-Type", "Content-Encoding"} {
		if v := http.Header(m.Headers).Get(k); v != "" {
			set(k, v)
		}
	}
	for k, v := range m.AddHeaders { // the transform's, canonical
		hd[k] = []string{v}
	}
	// The target's own headers win over anything taken from the sender,
	// and over the transform's.
	for k, v := range t.Headers {
		hd.Set(k, v)
	}
	id := m.EventID.String()
	ts := h.now()
	set("User-Agent", "hookgate")
	set("Idempotency-Key", id)
	set("Webhook-Id", id)
	set("Webhook-Timestamp", strconv.FormatInt(ts.Unix(), 10))
	if t.SigningKey != nil {
		set("Webhook-Signature", signature.SignStandard(t.SigningKey, id, ts, m.Body))
	}
	set("X-Hookgate-Sender", m.Sender)
	set("X-Hookgate-Delivery-Id", m.DeliveryID)
	return hd
}

// newRequest returns the POST of body with hd to u.
func newRequest(ctx context.Context, u *url.URL, hd http.Header, body []byte) *http.Request {
	req := &http.Request{
		Method:        http.MethodPost,
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        hd,
		Body:          io.NopCloser(bytes.NewReader(body)),
		GetBody:       func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil },
		ContentLength: int64(len(body)),
		Host:          u.Host,
	}
	if len(body) == 0 {
		req.Body, req.GetBody = http.NoBody, func() (io.ReadCloser, error) { return http.NoBody, nil }
	}
	return req.WithContext(ctx)
}

// roundTrip sends req through net/http and reads the answer as
// [direct.post] does.
func (h *HTTP) roundTrip(req *http.Request) (int, http.Header, []byte, error) {
	resp, err := h.send(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	kept, _ := readAnswer(resp.Body)
	return resp.StatusCode, resp.Header, kept, nil
}

// send sends a forward's request. It skips [http.Client.Do] when the
// client has no cookie jar and no timeout. A forward follows no redirect,
// so Do would only copy every request's headers for nothing.
func (h *HTTP) send(req *http.Request) (*http.Response, error) {
	if h.rt != nil {
		return h.rt.RoundTrip(req)
	}
	return h.client.Do(req)
}

// targetURL is a target's URL, parsed, and how [direct] reaches it, or nil.
type targetURL struct {
	url    *url.URL
	direct *directTarget
}

// targetURL returns raw parsed as [http.NewRequest] parses it. Each URL is
// parsed once per process. The result is shared: nothing may modify it.
func (h *HTTP) targetURL(raw string) (*targetURL, error) {
	if u, ok := h.urls.Load(raw); ok {
		return u.(*targetURL), nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	u.Host = strings.TrimSuffix(u.Host, ":") // as http.NewRequest does
	tu := &targetURL{url: u, direct: h.direct.target(u)}
	h.urls.Store(raw, tu)
	return tu, nil
}

// maxRetryAfter is the most parseRetryAfter returns. A year is far beyond
// any useful pause, and small enough to survive every conversion.
const maxRetryAfter = 365 * 24 * time.Hour

// parseRetryAfter reads a Retry-After value of RFC 9110: seconds, or an
// HTTP date after now. A larger value than [maxRetryAfter] saturates at it
// rather than overflow. It returns 0 when the value is absent, zero, past,
// or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s > int64(maxRetryAfter/time.Second) { // err is ErrRange only
			return maxRetryAfter
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter) // Sub saturates at the largest Duration
	}
	return 0
}

// errStatus is a target's answer other than 2xx.
type errStatus struct {
	status     int
	retryAfter time.Duration
}

func (e *errStatus) Error() string {
	if e.retryAfter > 0 {
		return fmt.Sprintf("target answered %d, Retry-After %s", e.status, e.retryAfter)
	}
	return fmt.Sprintf("target answered %d", e.status)
}
