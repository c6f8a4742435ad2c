package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/hookgate/hookgate/internal/config"
)

// Router sends each forward through the transport of its target's kind.
// A kind with no transport fails its forwards at once.
type Router struct {
	by map[config.TargetKind]Transport
}

// NewRouter returns the transports of a process, one per [config.TargetKind].
// HTTP goes over client. The brokers connect through dial, which is
// usually [AllowedHosts.DialContext]. All read the time from now.
// This is the one place a new transport is registered.
func NewRouter(client *http.Client, dial DialFunc, now func() time.Time) *Router {
	return &Router{by: map[config.TargetKind]Transport{
		config.KindHTTP:     NewHTTP(client, now),
		config.KindNATS:     NewNATS(dial, now),
		config.KindRabbitMQ: NewRabbitMQ(dial, now),
	}}
}

// DialFunc dials a broker's address.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Send sends m through the transport of its target's kind.
func (r *Router) Send(ctx context.Context, m Message) Sent {
	if t := r.by[m.Target.Kind()]; t != nil {
		return t.Send(ctx, m)
	}
	return Sent{Verdict: VerdictFailed, Err: errNoTransport(m.Target)}
}

// Close closes the transports that hold connections, after the last forward.
func (r *Router) Close() error {
	var errs []error
	for _, t := range r.by {
		if c, ok := t.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// errNoTransport is the error of a forward whose target's kind has no
// transport in this process.
func errNoTransport(t *config.Target) error {
	return &noTransportError{target: t.Name, kind: t.Kind()}
}

type noTransportError struct {
	target string
	kind   config.TargetKind
}

func (e *noTransportError) Error() string {
	return "target " + strconv.Quote(e.target) + ": no transport for " + string(e.kind) + " targets in this process"
}
