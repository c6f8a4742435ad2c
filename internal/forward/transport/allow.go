package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"

	"github.com/hookgate/hookgate/internal/config"
)

// AllowedHosts is the list of hosts forwards may reach, set by
// --forward-allowed-hosts. It holds host names, "*.domain" entries, IP
// addresses and CIDR prefixes. A nil list allows every host.
//
// A listed name is reached at whatever address DNS gives. Any other host
// is reached only at an address inside a listed prefix. [AllowedHosts.DialContext]
// checks each address after name resolution, so a name rebound elsewhere
// is never connected to.
type AllowedHosts struct {
	names    map[string]bool // lower case, without a trailing dot
	suffixes []string        // ".example.com" of "*.example.com"
	prefixes []netip.Prefix  // addresses as /32 and /128
	text     string          // as given
}

// AllowedHostsSetting names the setting in errors.
const AllowedHostsSetting = "--forward-allowed-hosts (HOOKGATE_FORWARD_ALLOWED_HOSTS)"

// ParseAllowedHosts parses a comma-separated list of host names,
// "*.domain" entries, IP addresses and CIDR prefixes. An empty list is
// nil, which allows every host. An entry with a port, a scheme or a path
// is an error, and so is a bare "*".
func ParseAllowedHosts(s string) (*AllowedHosts, error) {
	a := &AllowedHosts{names: map[string]bool{}, text: s}
	for e := range strings.SplitSeq(s, ",") {
		e = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(e), "."))
		if e == "" {
			continue
		}
		if p, err := netip.ParsePrefix(e); err == nil {
			a.prefixes = append(a.prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			a.prefixes = append(a.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		if strings.ContainsAny(e, "/:") && !strings.Contains(e, "://") {
			return nil, fmt.Errorf("forward allowed hosts: %q is not a host name, *.domain, an address or a CIDR prefix such as 10.0.0.0/8 (no port)", e)
		}
		name, wildcard := strings.CutPrefix(e, "*.")
		if !validHostName(name) {
			return nil, fmt.Errorf("forward allowed hosts: %q is not a host name, *.domain, an address or a CIDR prefix such as 10.0.0.0/8 (no scheme, port or path)", e)
		}
		if wildcard {
			a.suffixes = append(a.suffixes, "."+name)
		} else {
			a.names[name] = true
		}
	}
	if len(a.names) == 0 && len(a.suffixes) == 0 && len(a.prefixes) == 0 {
		return nil, nil
	}
	return a, nil
}

// validHostName reports whether s is a DNS name. Labels may hold '_', as
// some internal names do.
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// String returns the list as it was given.
func (a *AllowedHosts) String() string {
	if a == nil {
		return ""
	}
	return a.text
}

// allowsName reports whether the name host is listed or under a "*."
// entry.
func (a *AllowedHosts) allowsName(host string) bool {
	if a == nil {
		return true
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if a.names[host] {
		return true
	}
	for _, suf := range a.suffixes {
		if strings.HasSuffix(host, suf) {
			return true
		}
	}
	return false
}

// allowsAddr reports whether ip is inside a listed address or prefix.
func (a *AllowedHosts) allowsAddr(ip netip.Addr) bool {
	if a == nil {
		return true
	}
	ip = ip.Unmap()
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// allowsTarget reports whether a target whose URL has host may be
// configured. Any name is allowed when there are prefixes: each connection
// is checked instead.
func (a *AllowedHosts) allowsTarget(host string) bool {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return a.allowsAddr(ip)
	}
	return a.allowsName(host) || len(a.prefixes) > 0
}

// CheckTargets returns an error naming every target of cfg whose host the
// list does not allow. It checks each server of a NATS target's list. The
// error never holds more of the URL than the host.
func (a *AllowedHosts) CheckTargets(cfg *config.Config) error {
	if a == nil {
		return nil
	}
	var errs []error
	for i := range cfg.Senders {
		s := &cfg.Senders[i]
		for j := range s.Forward {
			t := &s.Forward[j]
			for _, srv := range t.Servers() {
				u, err := url.Parse(srv)
				if err != nil {
					continue // config refused it
				}
				if !a.allowsTarget(u.Hostname()) {
					errs = append(errs, fmt.Errorf("senders[%d].forward[%d].url (%s, target %s): its host %s is not in %s: add it (a name, *.domain, an address or a CIDR prefix) or point the target elsewhere",
						i, j, s.Name, t.Name, u.Hostname(), AllowedHostsSetting))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// ErrHostNotAllowed is the error of a connection the allowed hosts refuse.
var ErrHostNotAllowed = errors.New("not allowed by --forward-allowed-hosts")

// DialContext returns d's DialContext guarded by the list. A listed name
// is dialed as d dials it. Anything else is dialed only when the address,
// after name resolution, is inside a listed prefix. The check runs in d's
// Control, on every address tried, so DNS cannot rebind the name between
// the check and the connection. A refused connection's error wraps
// [ErrHostNotAllowed].
func (a *AllowedHosts) DialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if a == nil {
		return d.DialContext
	}
	guarded := *d
	inner := d.Control
	guarded.Control = func(network, address string, c syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !a.allowsAddr(ap.Addr()) {
			return fmt.Errorf("connect to %s: %w", address, ErrHostNotAllowed)
		}
		if inner != nil {
			return inner(network, address, c)
		}
		return nil
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if _, err := netip.ParseAddr(host); err != nil && a.allowsName(host) {
			return d.DialContext(ctx, network, addr)
		}
		if len(a.prefixes) == 0 {
			return nil, fmt.Errorf("connect to %s: %w", host, ErrHostNotAllowed)
		}
		return guarded.DialContext(ctx, network, addr)
	}
}
