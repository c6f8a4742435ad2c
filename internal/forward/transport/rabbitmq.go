package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookgate/hookgate/internal/config"
)

// RabbitMQ is the [Transport] of RabbitMQ targets. It publishes a forward
// to the target's exchange, persistent and mandatory, with message_id set
// to the event ID. The forward is delivered once the broker confirms it.
// A nack, an unroutable message, a missing confirm, and a broker that is
// down are retried.
//
// Forwards to one broker with the same credentials share one connection.
// Each publish takes a channel of its own, kept for the next ones. Its
// methods are safe for concurrent use.
type RabbitMQ struct {
	dial  DialFunc
	now   func() time.Time
	conns conns[amqpConn]
}

// amqpConn is a connection and its idle channels.
type amqpConn struct {
	conn *amqp.Connection
	mu   sync.Mutex
	idle []*amqpChannel
}

// amqpChannel is a channel in confirm mode, with the unroutable messages
// the broker returned on it.
type amqpChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
}

// maxIdleChannels is how many channels a connection keeps.
const maxIdleChannels = 64

// NewRabbitMQ returns the transport of RabbitMQ targets. It connects
// through dial, or [net.Dialer] when nil, and reads the time from now.
func NewRabbitMQ(dial DialFunc, now func() time.Time) *RabbitMQ {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return &RabbitMQ{dial: dial, now: now}
}

// Send publishes the forward once and classifies the outcome.
func (r *RabbitMQ) Send(ctx context.Context, m Message) Sent {
	t := m.Target
	b, sctx, cancel := bound(ctx, m)
	defer cancel()
	cut := func() bool { return b.cut(sctx) }
	timeout := b.timeout
	retry := func(err error, took time.Duration) Sent {
		if cut() {
			return Sent{Verdict: VerdictNone, Err: err}
		}
		return Sent{Verdict: VerdictRetry, Err: err, Took: took}
	}
	key := expand(t.RabbitMQ.RoutingKey, m, func(s string) string { return s })
	if err := refusedDestination(t.RabbitMQ.RoutingKey, key, false); err != nil {
		return Sent{Verdict: VerdictFailed, Err: fmt.Errorf("publish to RabbitMQ target %q: %w", t.Name, err)}
	}
	start := time.Now()
	c, err := r.conn(sctx, t)
	if err != nil {
		return retry(fmt.Errorf("connect to RabbitMQ target %q: %w", t.Name, err), time.Since(start))
	}
	ch, err := c.channel()
	if err != nil {
		r.drop(t, c)
		return retry(fmt.Errorf("open a channel to RabbitMQ target %q: %w", t.Name, err), time.Since(start))
	}
	now := r.now()
	id := m.EventID.String()
	headers := amqp.Table{}
	for _, h := range brokerHeaders(m, now) {
		headers[h[0]] = h[1]
	}
	pub := amqp.Publishing{
		Headers:         headers,
		ContentType:     headerValue(m.Headers, "Content-Type"),
		ContentEncoding: headerValue(m.Headers, "Content-Encoding"),
		DeliveryMode:    amqp.Persistent,
		MessageId:       id,
		Timestamp:       now,
		Type:            m.EventType,
		AppId:           "hookgate",
		Body:            m.Body,
	}
	if len(key) > 255 {
		ch.close()
		return Sent{Verdict: VerdictFailed, Err: fmt.Errorf("publish to RabbitMQ target %q: the routing key is %d bytes, more than RabbitMQ's 255", t.Name, len(key))}
	}
	dc, err := ch.ch.PublishWithDeferredConfirmWithContext(sctx, t.RabbitMQ.Exchange, key, true, false, pub)
	if err != nil {
		ch.close()
		return retry(fmt.Errorf("publish to RabbitMQ target %q: %w", t.Name, err), time.Since(start))
	}
	acked, err := dc.WaitContext(sctx)
	took := time.Since(start)
	if err != nil {
		// The channel's confirms are now out of step: drop it.
		ch.close()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no confirm within %s", timeout)
		}
		return retry(fmt.Errorf("publish to RabbitMQ target %q: %w", t.Name, err), took)
	}
	if !acked {
		c.put(ch)
		return retry(fmt.Errorf("publish to RabbitMQ target %q: the broker refused the message (nack)", t.Name), took)
	}
	// The broker returns an unroutable mandatory message before it
	// confirms it.
	if ch.returned(id) {
		c.put(ch)
		return retry(fmt.Errorf("publish to RabbitMQ target %q: no queue is bound to exchange %q with routing key %q (the message was returned)", t.Name, t.RabbitMQ.Exchange, key), took)
	}
	c.put(ch)
	return Sent{Verdict: VerdictDelivered, At: r.now().UTC(), Took: took,
		Ack: "confirmed (delivery tag " + strconv.FormatUint(dc.DeliveryTag, 10) + ")"}
}

// returned reports whether the broker returned the message id on the
// channel. It drops what else was returned.
func (c *amqpChannel) returned(id string) bool {
	for {
		select {
		case ret, ok := <-c.returns:
			if !ok {
				return false
			}
			if ret.MessageId == id {
				return true
			}
		default:
			return false
		}
	}
}

func (c *amqpChannel) close() { _ = c.ch.Close() }

// channel returns an idle channel of c, or a new one in confirm mode.
func (c *amqpConn) channel() (*amqpChannel, error) {
	c.mu.Lock()
	for len(c.idle) > 0 {
		ch := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		if !ch.ch.IsClosed() {
			c.mu.Unlock()
			return ch, nil
		}
	}
	c.mu.Unlock()
	ch, err := c.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	return &amqpChannel{ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, 16))}, nil
}

// put keeps ch for the next publish, or closes it when enough are kept.
func (c *amqpConn) put(ch *amqpChannel) {
	ch.returned("") // drain
	c.mu.Lock()
	if len(c.idle) < maxIdleChannels && !ch.ch.IsClosed() {
		c.idle = append(c.idle, ch)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	ch.close()
}

// amqpKey is the connection key of a target.
func amqpKey(t *config.Target) string {
	return t.URL + "\x00" + t.RabbitMQ.User + "\x00" + t.RabbitMQ.Password
}

// conn returns the connection to t's broker, and makes it when needed.
func (r *RabbitMQ) conn(ctx context.Context, t *config.Target) (*amqpConn, error) {
	s := r.conns.slot(amqpKey(t))
	if s == nil {
		return nil, errors.New("the process is stopping")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil && !s.c.conn.IsClosed() {
		return s.c, nil
	}
	cfg := amqp.Config{
		Properties: amqp.Table{"connection_name": "hookgate"},
		Dial:       handshakeDial(ctxDialer{ctx: context.WithoutCancel(ctx), dial: r.dial, timeout: time.Duration(t.Timeout)}),
		Heartbeat:  10 * time.Second,
	}
	if t.RabbitMQ.User != "" {
		cfg.SASL = []amqp.Authentication{&amqp.PlainAuth{Username: t.RabbitMQ.User, Password: t.RabbitMQ.Password}}
	}
	conn, err := connectWithin(ctx, func() (*amqp.Connection, error) { return amqp.DialConfig(t.URL, cfg) },
		func(c *amqp.Connection) { _ = c.Close() })
	if err != nil {
		return nil, err
	}
	s.c = &amqpConn{conn: conn}
	return s.c, nil
}

// handshakeDial returns d's Dial with a deadline on the connection. The
// deadline bounds the whole handshake: TCP, TLS and AMQP's open. A broker
// that accepts and never answers then costs nothing for ever.
// [amqp.DialConfig] clears the deadline once the connection is open.
func handshakeDial(d ctxDialer) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		deadline := time.Now().Add(d.timeout)
		c, err := d.Dial(network, addr)
		if err != nil {
			return nil, err
		}
		if err := c.SetDeadline(deadline); err != nil {
			_ = c.Close()
			return nil, err
		}
		return c, nil
	}
}

// drop forgets c, t's connection, and closes it.
func (r *RabbitMQ) drop(t *config.Target, c *amqpConn) {
	r.conns.forget(amqpKey(t), c, func(c *amqpConn) { _ = c.conn.Close() })
}

// Close closes the transport's connections. It always returns nil.
func (r *RabbitMQ) Close() error {
	r.conns.close(func(c *amqpConn) { _ = c.conn.Close() })
	return nil
}
