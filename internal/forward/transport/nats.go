package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/config"
)

// NATS is the [Transport] of NATS JetStream targets. It publishes a
// forward to the target's subject with Nats-Msg-Id set to the event ID, so
// that JetStream's duplicate window drops a repeat. The forward is
// delivered once the stream acknowledges it. A missing acknowledgement, a
// subject no stream takes, and a server that is down are retried.
//
// Forwards to one server with the same credentials share one connection.
// It connects to the servers of the target's URL only, unless
// [config.NATSTarget.DiscoveredServers] is set. Nothing is buffered while
// the connection is down. Its methods are safe for concurrent use.
type NATS struct {
	dial  DialFunc
	now   func() time.Time
	conns conns[natsConn]
}

type natsConn struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// NewNATS returns the transport of NATS targets. It connects through dial,
// or [net.Dialer] when nil, and reads the time from now.
func NewNATS(dial DialFunc, now func() time.Time) *NATS {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return &NATS{dial: dial, now: now}
}

// Send publishes the forward once and classifies the outcome.
func (n *NATS) Send(ctx context.Context, m Message) Sent {
	t := m.Target
	b, sctx, cancel := bound(ctx, m)
	defer cancel()
	cut := func() bool { return b.cut(sctx) }
	timeout := b.timeout
	subject := expand(t.NATS.Subject, m, subjectToken)
	if err := refusedDestination(t.NATS.Subject, subject, true); err != nil {
		return Sent{Verdict: VerdictFailed, Err: fmt.Errorf("publish to NATS target %q: %w", t.Name, err)}
	}
	start := time.Now()
	c, err := n.conn(sctx, t)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (not connected within %s)", errNATSUnreachable, timeout)
		}
		err = fmt.Errorf("connect to NATS target %q: %w", t.Name, natsUnreachable(err))
		if cut() {
			return Sent{Verdict: VerdictNone, Err: err}
		}
		return Sent{Verdict: VerdictRetry, Err: err, Took: time.Since(start)}
	}
	now := n.now()
	msg := &nats.Msg{Subject: subject, Data: m.Body, Header: nats.Header{}}
	for _, h := range brokerHeaders(m, now) {
		msg.Header.Set(h[0], h[1])
	}
	ack, err := c.js.PublishMsg(sctx, msg, jetstream.WithMsgID(m.EventID.String()))
	took := time.Since(start)
	switch {
	case err == nil: // stored, or a duplicate of a stored message
		return Sent{Verdict: VerdictDelivered, At: n.now().UTC(), Took: took, Ack: natsAck(ack)}
	case cut():
		return Sent{Verdict: VerdictNone, Err: fmt.Errorf("publish to NATS target %q: %w", t.Name, err)}
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject):
		// No attempt can succeed.
		return Sent{Verdict: VerdictFailed, Err: fmt.Errorf("publish to NATS target %q (subject %q): %w", t.Name, msg.Subject, err), Took: took}
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return Sent{Verdict: VerdictRetry, Err: fmt.Errorf("publish to NATS target %q: no JetStream stream takes subject %q", t.Name, msg.Subject), Took: took}
	case errors.Is(err, context.DeadlineExceeded):
		return Sent{Verdict: VerdictRetry, Err: fmt.Errorf("publish to NATS target %q: no acknowledgement within %s", t.Name, timeout), Took: took}
	default:
		if errors.Is(err, nats.ErrConnectionClosed) {
			n.drop(t, c)
		}
		return Sent{Verdict: VerdictRetry, Err: fmt.Errorf("publish to NATS target %q: %w", t.Name, natsUnreachable(err)), Took: took}
	}
}

// natsAck is JetStream's acknowledgement of a published message as text:
// its stream and sequence, and whether the stream found it a duplicate.
func natsAck(a *jetstream.PubAck) string {
	if a == nil {
		return ""
	}
	s := "stream " + a.Stream + " sequence " + strconv.FormatUint(a.Sequence, 10)
	if a.Duplicate {
		s += " (duplicate)"
	}
	return s
}

// errNATSUnreachable says a NATS server cannot be reached. It replaces
// nats.go's words for these cases, which mislead: "no servers available
// for connection", and "outbound buffer limit exceeded" while reconnecting.
var errNATSUnreachable = errors.New("NATS server unreachable")

// natsUnreachable returns err as [errNATSUnreachable] with its cause when
// it means the server cannot be reached, or err as it is.
func natsUnreachable(err error) error {
	var op *net.OpError
	switch {
	case errors.Is(err, ErrHostNotAllowed):
		return err
	case errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionReconnecting):
		return fmt.Errorf("%w (the connection was lost and is being made again)", errNATSUnreachable)
	case errors.Is(err, nats.ErrNoServers):
		return fmt.Errorf("%w (connection refused)", errNATSUnreachable)
	case errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("%w (%w)", errNATSUnreachable, err)
	}
	return err
}

// natsKey is the connection key of a target.
func natsKey(t *config.Target) string {
	return t.URL + "\x00" + t.NATS.Token + "\x00" + t.NATS.User + "\x00" + t.NATS.Password + "\x00" + strconv.FormatBool(t.NATS.DiscoveredServers)
}

// conn returns the connection to t's servers, and makes it when needed.
func (n *NATS) conn(ctx context.Context, t *config.Target) (*natsConn, error) {
	s := n.conns.slot(natsKey(t))
	if s == nil {
		return nil, errors.New("the process is stopping")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil && !s.c.nc.IsClosed() {
		return s.c, nil
	}
	opts := []nats.Option{
		nats.Name("hookgate"),
		nats.SetCustomDialer(ctxDialer{ctx: context.WithoutCancel(ctx), dial: n.dial, timeout: time.Duration(t.Timeout)}),
		nats.Timeout(time.Duration(t.Timeout)),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// A publish fails at once while the connection is down. Nothing
		// is sent later behind the back of an attempt already counted.
		nats.ReconnectBufSize(-1),
		nats.NoCallbacksAfterClientClose(),
	}
	if !t.NATS.DiscoveredServers {
		// nats.go would send the credentials to the servers a server
		// advertises.
		opts = append(opts, nats.IgnoreDiscoveredServers())
	}
	switch {
	case t.NATS.Token != "":
		opts = append(opts, nats.Token(t.NATS.Token))
	case t.NATS.User != "":
		opts = append(opts, nats.UserInfo(t.NATS.User, t.NATS.Password))
	}
	nc, err := connectWithin(ctx, func() (*nats.Conn, error) { return nats.Connect(t.URL, opts...) }, (*nats.Conn).Close)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.c = &natsConn{nc: nc, js: js}
	return s.c, nil
}

// drop forgets c, t's connection, and closes it.
func (n *NATS) drop(t *config.Target, c *natsConn) {
	n.conns.forget(natsKey(t), c, func(c *natsConn) { c.nc.Close() })
}

// Close closes the transport's connections. It always returns nil.
func (n *NATS) Close() error {
	n.conns.close(func(c *natsConn) { c.nc.Close() })
	return nil
}

// ctxDialer adapts a [DialFunc] to the brokers' clients, whose dials take
// no context. Each dial is bounded by timeout.
type ctxDialer struct {
	ctx     context.Context
	dial    DialFunc
	timeout time.Duration
}

// Dial dials address within the dialer's timeout.
func (d ctxDialer) Dial(network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(d.ctx, d.timeout)
	defer cancel()
	return d.dial(ctx, network, address)
}
