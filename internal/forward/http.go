package forward

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

// maxResponseBytes is how much of a target's response body is read (and
// discarded) so the connection can be reused.
const maxResponseBytes = 64 << 10

// HTTPTransport is the Transport of HTTP targets: it POSTs a forward's
// body, with its Content-Type and Content-Encoding, the target's extra
// headers and the identifying and signing headers (request), to the
// target's URL, within its timeout, and classifies the answer: a 2xx is
// delivered; 408, 429, 5xx (with their Retry-After), timeouts and
// connection errors are retried; another 4xx fails. Its methods are safe
// for concurrent use.
type HTTPTransport struct {
	client *http.Client
	// rt is client's transport when send may use it directly.
	rt http.RoundTripper
	// now is the clock of the Webhook-Timestamp, of the delivery times and
	// of Retry-After dates.
	now func() time.Time
	// urls are the targets' URLs parsed (targetURL), by URL.
	urls sync.Map
}

// NewHTTPTransport returns the transport that sends forwards with client
// (NewHTTPClient), reading the time from now (time.Now). A forward never
// follows a redirect: a client without a cookie jar or a timeout has its
// requests sent by its transport directly (send).
func NewHTTPTransport(client *http.Client, now func() time.Time) *HTTPTransport {
	h := &HTTPTransport{client: client, now: now}
	if client != nil && client.Transport != nil && client.Jar == nil && client.Timeout == 0 {
		h.rt = client.Transport
	}
	return h
}

// Send POSTs the forward once, within its target's timeout (or m.Limit
// when shorter), and classifies the outcome. One context and one timer
// bound the attempt either way.
func (h *HTTPTransport) Send(ctx context.Context, m Message) Sent {
	t := m.Target
	b, rctx, cancel := bound(ctx, m)
	defer cancel()
	req, err := h.request(rctx, m)
	if err != nil {
		return Sent{Verdict: VerdictFailed, Err: err}
	}
	start := time.Now()
	resp, err := h.send(req)
	if err != nil {
		took := time.Since(start)
		// *url.Error names the URL, which may hold credentials: keep only
		// what went wrong (it names the host and port at most).
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		err = fmt.Errorf("post to target %q: %w", t.Name, err)
		if b.cut(rctx) {
			// The process is stopping (or the caller's time is up), not
			// the target failing.
			return Sent{Verdict: VerdictNone, Err: err}
		}
		return Sent{Verdict: VerdictRetry, Err: err, Took: took}
	}
	if resp.Body != http.NoBody {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
	}
	_ = resp.Body.Close()
	took := time.Since(start)

	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return Sent{Verdict: VerdictDelivered, Status: code, At: h.now().UTC(), Took: took}
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		e := &errStatus{status: code, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), h.now())}
		return Sent{Verdict: VerdictRetry, Status: code, Err: e, RetryAfter: e.retryAfter, Took: took,
			// The whole target waits, not just this forward.
			PausesTarget: code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable}
	default:
		return Sent{Verdict: VerdictFailed, Status: code, Err: &errStatus{status: code}, Took: took}
	}
}

// request builds the forward's POST: the original body and Content-Type,
// the target's extra headers, and the identifying and signing headers. The
// target's URL is parsed once (targetURL), and the header map is filled
// with canonical keys and one backing array for its values.
func (h *HTTPTransport) request(ctx context.Context, m Message) (*http.Request, error) {
	t := m.Target
	u, err := h.targetURL(t.URL)
	if err != nil {
		return nil, fmt.Errorf("build request for target %q: the URL does not parse", t.Name)
	}
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
	// The target's own headers win over anything taken from the sender.
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
	body := m.Body
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
	return req.WithContext(ctx), nil
}

// send sends a forward's request. Through the client's transport itself
// when the client adds nothing a forward needs: a forward follows no
// redirect (NewHTTPClient's CheckRedirect: a redirect is an answer), and
// has no cookie jar and no client timeout (its context bounds it), so
// http.Client.Do would only copy every request's header map for redirects
// it never follows (make bench's profile).
func (h *HTTPTransport) send(req *http.Request) (*http.Response, error) {
	if h.rt != nil {
		return h.rt.RoundTrip(req)
	}
	return h.client.Do(req)
}

// targetURL returns raw parsed, as http.NewRequest would parse it, from a
// cache: a target's URL is parsed once per process, not once per forward.
// The *url.URL returned is shared: nothing may modify it.
func (h *HTTPTransport) targetURL(raw string) (*url.URL, error) {
	if u, ok := h.urls.Load(raw); ok {
		return u.(*url.URL), nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	u.Host = strings.TrimSuffix(u.Host, ":") // as http.NewRequest does
	h.urls.Store(raw, u)
	return u, nil
}

// maxRetryAfter is the most parseRetryAfter returns: a year, far beyond
// any RetryAfterMax worth setting, and small enough that the value stays
// what it is through every conversion (seconds as a float64 in a job's
// recorded output, a time plus it).
const maxRetryAfter = 365 * 24 * time.Hour

// parseRetryAfter reads a Retry-After value (RFC 9110 §10.2.3): a number
// of seconds (digits only) or an HTTP date, from now. It saturates: a
// number or a date beyond maxRetryAfter (99999999999999 seconds, more
// digits than an int64 holds, the year 9999) is maxRetryAfter, never a
// product that overflowed into something negative or small. 0 when absent,
// 0 seconds, a date not after now, or unreadable (a sign, a fraction,
// garbage).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s > int64(maxRetryAfter/time.Second) { // err: only ErrRange, digits past an int64
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
