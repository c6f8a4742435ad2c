package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"os"
	"slices"
	"strings"

	"github.com/hookgate/hookgate/internal/rules"
	"github.com/hookgate/hookgate/internal/sender"
)

// exitError ends the process with code, printing err when it is not nil.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// headerFlags collects --header 'Name: value' flags.
type headerFlags http.Header

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(v string) error {
	name, val, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") {
		return errors.New(`want 'Name: value'`)
	}
	http.Header(h).Add(name, strings.TrimSpace(val))
	return nil
}

// rulesCommand is `hookgate rules test`: it runs a target's routes and
// rules on a body, as ingest and a forward would, and prints the outcome.
// It exits 0 when the target gets the forward, 1 when the event is
// filtered out, and 2 on an error.
func rulesCommand(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	c := newCmdFlags("hookgate rules test", "hookgate rules test --config hookgate.yaml --sender S --target T [--header 'K: V']... [FILE]",
		"Run a target's filter and transform on a body (FILE, or standard input), as ingest and a forward would, and print the outcome.\n"+
			"It exits 0 when the target gets the forward, 1 when the event is filtered out, and 2 on an error.", getenv)
	var cfgPath, senderName, targetName string
	c.String(&cfgPath, "config", "FILE", "HOOKGATE_CONFIG", "hookgate.yaml", "configuration file")
	c.String(&senderName, "sender", "S", "", "", "the sender's name (required)")
	c.String(&targetName, "target", "T", "", "", "the target's name (required)")
	h := headerFlags(http.Header{})
	c.Var(h, "header", "'K: V'", "", "", "a request header (repeatable)")
	if len(args) > 0 && isHelpFlag(args[0]) {
		args = []string{"test", args[0]} // hookgate rules --help: the help of rules test
	}
	if len(args) == 0 || args[0] != "test" {
		return c.usageError(errors.New("the only subcommand is test"))
	}
	if done, err := c.parse(args[1:], stdout); done || err != nil {
		return err
	}
	fail := func(err error) error { return &exitError{2, err} }
	if senderName == "" || targetName == "" {
		return fail(errors.New("--sender and --target are required"))
	}
	if len(c.args) > 1 {
		return fail(fmt.Errorf("unexpected argument %q: give one file, or none for standard input", c.args[1]))
	}
	set, err := sender.Load(cfgPath)
	if err != nil {
		return fail(err)
	}
	s, ok := set.Get(senderName)
	if !ok {
		return fail(fmt.Errorf("no sender %q in %s", senderName, cfgPath))
	}
	t, ok := s.Target(targetName)
	if !ok {
		return fail(fmt.Errorf("sender %q has no target %q", senderName, targetName))
	}
	var body []byte
	if len(c.args) == 1 {
		body, err = os.ReadFile(c.args[0])
	} else {
		body, err = io.ReadAll(io.LimitReader(stdin, s.MaxBodyBytes+1))
	}
	if err != nil {
		return fail(err)
	}
	if int64(len(body)) > s.MaxBodyBytes {
		return fail(fmt.Errorf("the body is over the sender's max_body_bytes (%d)", s.MaxBodyBytes))
	}
	hdr := http.Header(h)

	// What ingest reads: the event type, the delivery ID, the routes.
	in := s.Inspect(body)
	eventType := s.EventTypeOf(hdr, &in)
	id, err := s.DeliveryIDOf(hdr, body)
	if err != nil {
		fmt.Fprintf(stderr, "note: %v; delivery_id is empty\n", err)
	}
	if eventType == "" {
		fmt.Fprintln(stdout, "event_type: (none)")
	} else {
		fmt.Fprintf(stdout, "event_type: %s\n", eventType)
	}
	if !slices.Contains(s.Route(eventType, hdr, &in), t.Name) {
		fmt.Fprintln(stdout, "routes: filtered out (event_types or match)")
		return &exitError{1, nil}
	}
	ct := hdr.Get("Content-Type")
	a := rules.NewActivation(rules.Input{Sender: s.Name, DeliveryID: id, EventType: eventType, Headers: hdr, Body: body, ContentType: ct})
	switch {
	case t.Filter == nil:
		fmt.Fprintln(stdout, "filter: none")
	default:
		pass, err := t.Filter.Eval(a)
		if err != nil {
			return fail(err)
		}
		if !pass {
			fmt.Fprintln(stdout, "filter: filtered out")
			return &exitError{1, nil}
		}
		fmt.Fprintln(stdout, "filter: passes")
	}

	// What the forward carries: the stored body and headers, transformed.
	stored := s.StoredBody(body, ct)
	out := map[string]string{}
	if ct != "" {
		out["Content-Type"] = ct
	}
	if t.Transform != nil {
		fa := rules.NewActivation(rules.Input{Sender: s.Name, DeliveryID: id, EventType: eventType,
			Headers: s.HeaderFilter.Filter(hdr), Body: stored, ContentType: ct})
		r, err := t.Transform.Apply(fa, int(s.MaxBodyBytes))
		if err != nil {
			return fail(err)
		}
		if r.Body != nil {
			stored = r.Body
		}
		delete(out, "Content-Type")
		if r.ContentType != "" {
			out["Content-Type"] = r.ContentType
		}
		for k, v := range r.Headers {
			out[k] = v
		}
	}
	// The target's own headers win; they may hold credentials: not shown.
	for k := range t.Headers {
		out[textproto.CanonicalMIMEHeaderKey(k)] = "(the target's headers: not shown)"
	}
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(stdout, "%s: %s\n", k, out[k])
	}
	fmt.Fprintln(stdout)
	if _, err := stdout.Write(stored); err != nil {
		return fail(err)
	}
	if len(stored) > 0 && stored[len(stored)-1] != '\n' {
		fmt.Fprintln(stdout)
	}
	return nil
}
