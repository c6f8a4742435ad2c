package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/api"
)

// defaultAPIURL is where `hookgate api` finds hookgate without --url or
// HOOKGATE_URL: make run's address.
const defaultAPIURL = "http://localhost:8080"

// apiSub is a subcommand of `hookgate api`.
type apiSub struct {
	command
	run func(ctx context.Context, a *apiRun, args []string) error
}

// apiSubs are the subcommands of `hookgate api`, in the order its help
// lists them.
var apiSubs = []apiSub{
	{command{"senders", "list the configured senders and their targets"}, apiSenders},
	{command{"targets", "list a sender's targets: breaker, pause and forwards by state"}, apiTargets},
	{command{"deliveries", "list a sender's deliveries, newest first"}, apiDeliveries},
	{command{"delivery", "show one delivery: its stored answer and its forwards"}, apiDelivery},
	{command{"event", "show an event: headers, body, its forwards and their attempts"}, apiEvent},
	{command{"attempts", "list every kept attempt of an event's forwards, newest first, with the target's answer and its cause"}, apiAttempts},
	{command{"failed", "list a target's failed forwards, the latest first"}, apiFailed},
	{command{"forwards", "list a target's forwards, in any state"}, apiForwards},
	{command{"redeliver", "forward an event again (--event), or a target's forwards in bulk (--sender, --target)"}, apiRedeliver},
	{command{"blocked", "list an ordered target's keys that a failed forward holds, with how many wait"}, apiBlocked},
	{command{"skip", "skip the failed forward that holds its ordering key, releasing the key's next forward"}, apiSkip},
	{command{"pause", "hold a target's forwards in every process until it is resumed"}, apiPause},
	{command{"resume", "let a paused target's held forwards go"}, apiResume},
	{command{"reload", "make the process that answers read hookgate.yaml again"}, apiReload},
	{command{"audit", "list the operator actions, newest first: who did what, from where, and how it went"}, apiAudit},
}

// printAPISubs writes the help of `hookgate api`: its subcommands.
func printAPISubs(w io.Writer) {
	fmt.Fprintln(w, "usage: hookgate api SUBCOMMAND [FLAGS]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Operate a running hookgate through its HTTP API (/v1/…), with the admin token.")
	fmt.Fprintln(w, "Tables are for people; --json prints the API's answer as it is, for scripts.")
	fmt.Fprintln(w, "Exit status: 0 done, 1 the API refused or could not be reached, 2 a usage error.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Subcommands:")
	subs := make([]command, len(apiSubs))
	for i, s := range apiSubs {
		subs[i] = s.command
	}
	printList(w, subs)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "hookgate api SUBCOMMAND --help shows its flags, one a line. Every subcommand takes")
	fmt.Fprintln(w, "--url (HOOKGATE_URL), --token (HOOKGATE_TOKEN, else HOOKGATE_ADMIN_TOKEN), --json and --timeout.")
}

// apiCommand is `hookgate api SUBCOMMAND`: the operator API from the
// command line, through the client generated from openapi.yaml. An error
// of the API, or an unreachable API, ends it with exit status 1; a usage
// error with 2. The token is never printed.
func apiCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelpFlag(args[0]) {
		printAPISubs(stdout)
		return nil
	}
	if len(args) == 0 {
		var b strings.Builder
		printAPISubs(&b)
		return &exitError{2, errors.New("api: no subcommand given\n" + strings.TrimRight(b.String(), "\n"))}
	}
	i := slices.IndexFunc(apiSubs, func(s apiSub) bool { return s.name == args[0] })
	if i < 0 {
		names := make([]string, len(apiSubs))
		for i, s := range apiSubs {
			names[i] = s.name
		}
		return &exitError{2, fmt.Errorf("api: unknown subcommand %q: use %s (hookgate api --help)", args[0], strings.Join(names, ", "))}
	}
	a := &apiRun{name: args[0], getenv: getenv, stdout: stdout, stderr: stderr}
	err := apiSubs[i].run(ctx, a, args[1:])
	if err == nil {
		return nil
	}
	if ee := (*exitError)(nil); errors.As(err, &ee) {
		return a.redacted(ee)
	}
	return a.redacted(&exitError{1, err})
}

// apiRun is one run of a subcommand of `hookgate api`: its common flags
// and where it prints.
type apiRun struct {
	name           string
	getenv         func(string) string
	stdout, stderr io.Writer

	url, token string
	json       bool
	timeout    time.Duration
	client     *api.ClientWithResponses
}

// flags returns the flags of the subcommand. parse adds the common ones
// after the subcommand's own.
func (a *apiRun) flags(usage, about string) *cmdFlags {
	c := newCmdFlags("hookgate api "+a.name, "hookgate api "+a.name+" "+usage, about, a.getenv)
	c.positional = true
	return c
}

// parse adds the common flags to c, parses args, checks the URL and the
// token and makes the client. It returns done when it printed the help.
func (a *apiRun) parse(c *cmdFlags, args []string) (done bool, err error) {
	c.String(&a.url, "url", "URL", "HOOKGATE_URL", defaultAPIURL, "hookgate's base URL")
	c.fs.StringVar(&a.token, "token", c.envOr("HOOKGATE_TOKEN", ""), "")
	c.row("token", "TOKEN", "HOOKGATE_TOKEN", "HOOKGATE_ADMIN_TOKEN's value", "bearer token of the operator API (prefer the variable: a flag shows in ps)")
	c.Bool(&a.json, "json", "print the API's JSON answer as it is, for scripts")
	c.fs.DurationVar(&a.timeout, "timeout", 30*time.Second, "")
	c.row("timeout", "DURATION", "", "30s", "how long to wait for the answer")
	if done, err := c.parse(args, a.stdout); done || err != nil {
		return done, err
	}
	if a.token == "" {
		a.token = a.getenv("HOOKGATE_ADMIN_TOKEN")
	}
	u, err := url.Parse(a.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false, c.usageError(errors.New("--url (HOOKGATE_URL) must be an http:// or https:// URL, such as " + defaultAPIURL))
	}
	switch {
	case a.token == "":
		return false, c.usageError(errors.New("no token: set HOOKGATE_TOKEN (or HOOKGATE_ADMIN_TOKEN), or give --token"))
	case strings.ContainsFunc(a.token, func(r rune) bool { return r <= ' ' || r > '~' }):
		return false, c.usageError(errors.New("the token has a character other than visible ASCII (a space, a control character), which hookgate's tokens never have"))
	case a.timeout <= 0:
		return false, c.usageError(errors.New("--timeout must be a positive duration, such as 30s"))
	}
	token := a.token
	a.client, err = api.NewClientWithResponses(strings.TrimRight(a.url, "/"),
		api.WithHTTPClient(problemDoer{&http.Client{Timeout: a.timeout}}),
		api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	if err != nil {
		return false, c.usageError(err)
	}
	return false, nil
}

// redacted returns ee with the token, should any message hold it, replaced.
func (a *apiRun) redacted(ee *exitError) error {
	if ee.err == nil || a.token == "" || !strings.Contains(ee.err.Error(), a.token) {
		return ee
	}
	return &exitError{ee.code, errors.New(strings.ReplaceAll(ee.err.Error(), a.token, "(the token)"))}
}

// printJSON writes an answer's body, ending in a newline: as it is with
// --json, else without control characters.
func (a *apiRun) printJSON(body []byte) error {
	if !a.json {
		// An answer that was not the JSON expected, shown to a person:
		// without the control characters it may hold.
		body = []byte(printable(string(body)))
	}
	if _, err := a.stdout.Write(body); err != nil {
		return err
	}
	if !bytes.HasSuffix(body, []byte("\n")) {
		_, err := io.WriteString(a.stdout, "\n")
		return err
	}
	return nil
}

// table returns a tabwriter on stdout; Flush it.
func (a *apiRun) table() *tabwriter.Writer {
	return tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
}

// problemDoer sends requests with its client, and turns an answer other
// than 2xx into an apiError: the problem+json's title and detail.
type problemDoer struct{ c *http.Client }

func (d problemDoer) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach hookgate: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &apiError{status: resp.StatusCode}
	var p api.Problem
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") && json.Unmarshal(body, &p) == nil {
		e.title, e.detail = p.Title, p.Detail
	}
	if e.title == "" {
		e.title = http.StatusText(resp.StatusCode)
	}
	return nil, e
}

// apiError is an answer of the API other than 2xx.
type apiError struct {
	status        int
	title, detail string
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("%d %s", e.status, cell(e.title))
	if e.detail != "" {
		s += ": " + cell(e.detail)
	}
	return s
}

// cell returns s for a table's cell or a line: printable, on one line.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\t", " ", "\n", " ").Replace(printable(s))
}

// cellp is cell of *p, or "-" for nil.
func cellp(p *string) string {
	if p == nil {
		return "-"
	}
	return cell(*p)
}

// when writes t in UTC, or "-".
func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return cell(fmt.Sprint(*p))
}

// required fails with a usage error when a flag that must be given is not.
func required(c *cmdFlags, vals ...string) error {
	for i := 0; i+1 < len(vals); i += 2 {
		if vals[i+1] == "" {
			return c.usageError(fmt.Errorf("--%s is required", vals[i]))
		}
	}
	return nil
}

func apiSenders(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("", "List the configured senders: preset, signature scheme and forward targets (GET /v1/senders).")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if err := c.noArgs(); err != nil {
		return err
	}
	r, err := a.client.ListSendersWithResponse(ctx)
	if err != nil {
		return err
	}
	if a.json || r.JSON200 == nil {
		return a.printJSON(r.Body)
	}
	tw := a.table()
	fmt.Fprintln(tw, "SENDER\tPRESET\tSIGNATURE\tTARGETS")
	for _, s := range r.JSON200.Items {
		var targets []string
		for _, t := range s.Forward {
			targets = append(targets, t.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cell(s.Name), cell(string(s.Preset)), cell(string(s.Signature.Scheme)), cell(strings.Join(targets, ", ")))
	}
	return tw.Flush()
}

func apiTargets(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("--sender S", "List a sender's targets: the breaker, an operator's pause, what holds them and their forwards by state (GET /v1/senders/{sender}/targets).")
	var sender string
	c.String(&sender, "sender", "S", "", "", "the sender's name (required)")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if err := errors.Join(c.noArgs(), required(c, "sender", sender)); err != nil {
		return err
	}
	r, err := a.client.ListTargetsWithResponse(ctx, sender)
	if err != nil {
		return err
	}
	if a.json || r.JSON200 == nil {
		return a.printJSON(r.Body)
	}
	tw := a.table()
	fmt.Fprintln(tw, "TARGET\tBREAKER\tPAUSED\tPENDING\tRUNNING\tRETRYING\tDELIVERED\tFAILED\tHELD\tURL")
	for _, t := range r.JSON200.Items {
		paused := "no"
		if p := t.Pause; p != nil {
			paused = "since " + when(&p.Since)
			if p.Until != nil {
				paused += " until " + when(p.Until)
			}
			if p.Reason != "" {
				paused += " (" + p.Reason + ")"
			}
		}
		f := t.Forwards
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", cell(t.Name), cell(string(t.Breaker.State)), cell(paused),
			f.Pending, f.Running, f.Retrying, f.Delivered, f.Failed, orDash(t.Held), cell(t.Url))
	}
	return tw.Flush()
}

func apiDeliveries(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("--sender S [--limit N] [--event-type T] [--cursor C]", "List a sender's deliveries, newest first (GET /v1/senders/{sender}/deliveries).")
	var sender, eventType, cursor string
	var limit int
	c.String(&sender, "sender", "S", "", "", "the sender's name (required)")
	c.fs.IntVar(&limit, "limit", 50, "")
	c.row("limit", "N", "", "50", "the most deliveries listed, 1 to 500")
	c.String(&eventType, "event-type", "T", "", "", "only events of this type: exact (invoice.paid) or a prefix (invoice.*)")
	c.String(&cursor, "cursor", "C", "", "", "the page after the one that printed this cursor")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if err := errors.Join(c.noArgs(), required(c, "sender", sender)); err != nil {
		return err
	}
	p := &api.ListDeliveriesParams{Limit: &limit}
	if eventType != "" {
		p.EventType = &eventType
	}
	if cursor != "" {
		p.Cursor = &cursor
	}
	r, err := a.client.ListDeliveriesWithResponse(ctx, sender, p)
	if err != nil {
		return err
	}
	if a.json || r.JSON200 == nil {
		return a.printJSON(r.Body)
	}
	tw := a.table()
	fmt.Fprintln(tw, "RECEIVED\tDELIVERY ID\tEVENT ID\tEVENT TYPE\tANSWERED")
	for _, d := range r.JSON200.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", when(&d.ReceivedAt), cell(d.DeliveryId), d.EventId, cell(d.EventType), d.ResponseStatus)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := r.JSON200.NextCursor; n != nil {
		fmt.Fprintf(a.stdout, "More: add --cursor %s\n", cell(*n))
	}
	return nil
}

func apiDelivery(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("--sender S DELIVERY_ID", "Show one delivery: its event, its stored answer and its forwards (GET /v1/senders/{sender}/deliveries/{delivery_id}).")
	var sender string
	c.String(&sender, "sender", "S", "", "", "the sender's name (required)")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if len(c.args) != 1 {
		return c.usageError(errors.New("give one delivery ID"))
	}
	if err := required(c, "sender", sender); err != nil {
		return err
	}
	r, err := a.client.GetDeliveryWithResponse(ctx, sender, c.args[0])
	if err != nil {
		return err
	}
	if a.json || r.JSON200 == nil {
		return a.printJSON(r.Body)
	}
	d := r.JSON200
	tw := a.table()
	fmt.Fprintf(tw, "sender\t%s\n", cell(d.Sender))
	fmt.Fprintf(tw, "delivery ID\t%s\n", cell(d.DeliveryId))
	fmt.Fprintf(tw, "event ID\t%s\n", d.EventId)
	fmt.Fprintf(tw, "event type\t%s\n", cell(d.EventType))
	fmt.Fprintf(tw, "received\t%s\n", when(&d.ReceivedAt))
	fmt.Fprintf(tw, "key expires\t%s\n", when(&d.ExpiresAt))
	fmt.Fprintf(tw, "answered\t%d\n", d.Response.Status)
	if err := tw.Flush(); err != nil {
		return err
	}
	return a.printForwards(d.Forwards, d.RuleErrors)
}

// printForwards writes a delivery's forwards, one a line, and the targets
// whose filter failed on it.
func (a *apiRun) printForwards(forwards []api.ForwardState, ruleErrors []api.RuleError) error {
	fmt.Fprintf(a.stdout, "\nForwards (%d):\n", len(forwards))
	tw := a.table()
	fmt.Fprintln(tw, "  JOB\tTARGET\tSTATE\tATTEMPTS\tLAST STATUS\tLAST ERROR\tCREATED\tDELIVERED\tHELD")
	for _, f := range forwards {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\n", orDash(f.JobId), cell(f.Target), f.State, f.Attempts, f.MaxAttempts,
			orDash(f.LastStatus), orDash(f.LastError), when(&f.CreatedAt), when(f.DeliveredAt), orDash(f.Held))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range ruleErrors {
		fmt.Fprintf(a.stdout, "Rule error: target %s, %s: %s (no forward)\n", cell(e.Target), e.Rule, cell(e.Error))
	}
	return nil
}

func apiEvent(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("EVENT_ID", "Show an event: its headers and body (GET /v1/events/{event_id}), then its delivery's forwards\n"+
		"(GET /v1/senders/{sender}/deliveries/{delivery_id}) and their attempts (GET /v1/events/{event_id}/attempts).\n"+
		"--json prints the event's answer.")
	id, done, err := a.oneEventID(c, args)
	if done || err != nil {
		return err
	}
	r, err := a.client.GetEventWithResponse(ctx, id)
	if err != nil {
		return err
	}
	if a.json || r.JSON200 == nil {
		return a.printJSON(r.Body)
	}
	e := r.JSON200
	tw := a.table()
	fmt.Fprintf(tw, "event ID\t%s\n", e.EventId)
	fmt.Fprintf(tw, "sender\t%s\n", cell(e.Sender))
	fmt.Fprintf(tw, "delivery ID\t%s\n", cell(e.DeliveryId))
	fmt.Fprintf(tw, "event type\t%s\n", cell(e.EventType))
	fmt.Fprintf(tw, "received\t%s\n", when(&e.ReceivedAt))
	names := make([]string, 0, len(e.Headers))
	for k := range e.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range e.Headers[k] {
			fmt.Fprintf(tw, "header\t%s: %s\n", cell(k), cell(v))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "body (%s): %s\n", e.BodyEncoding, eventBody(r.Body, e.BodyEncoding))
	// The forwards are the delivery's: the event's answer has none.
	d, err := a.client.GetDeliveryWithResponse(ctx, e.Sender, e.DeliveryId)
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusNotFound {
		fmt.Fprintf(a.stdout, "\nForwards: not shown: %s\n", ae)
		return nil
	}
	if err != nil {
		return err
	}
	if d.JSON200 == nil {
		return fmt.Errorf("GET the delivery: answered %s without JSON", d.Status())
	}
	if err := a.printForwards(d.JSON200.Forwards, e.RuleErrors); err != nil {
		return err
	}
	at, err := a.client.GetEventAttemptsWithResponse(ctx, id)
	if err != nil {
		return err
	}
	if at.JSON200 == nil {
		return fmt.Errorf("GET the attempts: answered %s without JSON", at.Status())
	}
	a.printAttempts(at.JSON200.Attempts)
	return nil
}

func apiAttempts(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("EVENT_ID", "List every kept attempt of an event's forwards, newest first: when, the target, the outcome,\n"+
		"the status or the broker's acknowledgement, the cause, and the answer's headers and body, escaped\n"+
		"(GET /v1/events/{event_id}/attempts).")
	id, done, err := a.oneEventID(c, args)
	if done || err != nil {
		return err
	}
	r, err := a.client.GetEventAttemptsWithResponse(ctx, id)
	if err != nil {
		return err
	}
	if a.json || r.JSON200 == nil {
		return a.printJSON(r.Body)
	}
	a.printAttempts(r.JSON200.Attempts)
	return nil
}

// printAttempts writes attempts, newest first as the API lists them: a
// line each, then the answer's headers and body, quoted and escaped, so
// that a target's answer never writes control characters to the terminal.
func (a *apiRun) printAttempts(attempts []api.Attempt) {
	fmt.Fprintf(a.stdout, "\nAttempts (%d, newest first):\n", len(attempts))
	for _, at := range attempts {
		answer := "-"
		switch {
		case at.Status != nil:
			answer = strconv.Itoa(*at.Status)
		case at.Ack != nil && *at.Ack != "":
			answer = "ack " + cell(*at.Ack)
		}
		fmt.Fprintf(a.stdout, "  %s  %s  %s  %s  took %.1f ms  %s\n", at.StartedAt.UTC().Format("2006-01-02 15:04:05.000Z"), cell(at.Target),
			cell(string(at.Outcome)), answer, at.DurationMs, cell(at.CauseText))
		if at.Error != nil && *at.Error != "" {
			fmt.Fprintf(a.stdout, "    error: %s\n", strconv.Quote(*at.Error))
		}
		for _, name := range slices.Sorted(maps.Keys(at.Headers)) {
			for _, v := range at.Headers[name] {
				fmt.Fprintf(a.stdout, "    %s: %s\n", cell(name), strconv.Quote(v))
			}
		}
		if at.Body != "" {
			body := at.Body
			if at.BodyEncoding == api.AttemptBodyEncodingBase64 {
				if raw, err := base64.StdEncoding.DecodeString(body); err == nil {
					body = string(raw)
				}
			}
			fmt.Fprintf(a.stdout, "    body (%d bytes): %s\n", len(body), strconv.Quote(body))
		}
	}
}

// eventBody returns the body of an event's answer for a line: compact
// JSON, or the bytes base64 holds, as the sink prints them.
func eventBody(answer []byte, enc api.BodyEncoding) string {
	var e struct {
		Body json.RawMessage `json:"body"`
	}
	if json.Unmarshal(answer, &e) != nil || len(e.Body) == 0 {
		return "-"
	}
	if enc == api.BodyEncodingJson {
		var b bytes.Buffer
		if json.Compact(&b, e.Body) == nil {
			return shownBody(b.Bytes())
		}
	}
	var s string
	if json.Unmarshal(e.Body, &s) == nil {
		if raw, err := base64.StdEncoding.DecodeString(s); err == nil {
			return shownBody(raw)
		}
	}
	return shownBody(e.Body)
}

// oneEventID parses the flags and the one event ID of a subcommand that
// takes one; done is true when the help was shown.
func (a *apiRun) oneEventID(c *cmdFlags, args []string) (id api.EventID, done bool, err error) {
	if done, err := a.parse(c, args); done || err != nil {
		return id, done, err
	}
	if len(c.args) != 1 {
		return id, false, c.usageError(errors.New("give one event ID"))
	}
	id, err = uuidArg(c, c.args[0])
	return id, false, err
}

// uuidArg parses an event ID, or fails with a usage error.
func uuidArg(c *cmdFlags, s string) (api.EventID, error) {
	var id api.EventID
	if err := id.UnmarshalText([]byte(s)); err != nil {
		return id, c.usageError(fmt.Errorf("%q is not an event ID (a UUID)", s))
	}
	return id, nil
}

func apiFailed(ctx context.Context, a *apiRun, args []string) error {
	return a.forwards(ctx, args, "failed")
}

func apiForwards(ctx context.Context, a *apiRun, args []string) error {
	return a.forwards(ctx, args, "")
}

// forwards is `hookgate api forwards`, and `failed` when state is failed.
func (a *apiRun) forwards(ctx context.Context, args []string, state string) error {
	usage, about := "--sender S --target T [--state STATE] [--since 2h] [--until 30m] [--limit N] [--cursor C]",
		"List a target's forwards, newest first (GET /v1/senders/{sender}/targets/{target}/forwards)."
	if state != "" {
		usage, about = "--sender S --target T [--since 2h] [--until 30m] [--limit N] [--cursor C]",
			"List a target's failed forwards, the latest failure first (GET /v1/senders/{sender}/targets/{target}/forwards?state=failed).\n"+
				"hookgate api redeliver sends them again."
	}
	c := a.flags(usage, about)
	var sender, target, since, until, cursor string
	var limit int
	c.String(&sender, "sender", "S", "", "", "the sender's name (required)")
	c.String(&target, "target", "T", "", "", "the target's name (required)")
	if state == "" {
		c.String(&state, "state", "STATE", "", "", "only forwards in this state: pending, running, retrying, delivered or failed")
	}
	c.String(&since, "since", "TIME", "", "", "only forwards at or after this time: a duration ago (2h) or an RFC 3339 time")
	c.String(&until, "until", "TIME", "", "", "only forwards before this time: a duration ago (30m) or an RFC 3339 time")
	c.fs.IntVar(&limit, "limit", 50, "")
	c.row("limit", "N", "", "50", "the most forwards listed, 1 to 500")
	c.String(&cursor, "cursor", "C", "", "", "the page after the one that printed this cursor")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if err := errors.Join(c.noArgs(), required(c, "sender", sender, "target", target)); err != nil {
		return err
	}
	p := &api.ListTargetForwardsParams{Limit: &limit}
	if state != "" {
		s := api.ListTargetForwardsParamsState(state)
		p.State = &s
	}
	var err error
	if p.Since, err = timeFlag(c, "since", since); err != nil {
		return err
	}
	if p.Until, err = timeFlag(c, "until", until); err != nil {
		return err
	}
	if cursor != "" {
		p.Cursor = &cursor
	}
	r, err := a.client.ListTargetForwardsWithResponse(ctx, sender, target, p)
	if err != nil {
		return err
	}
	if a.json || r.JSON200 == nil {
		return a.printJSON(r.Body)
	}
	tw := a.table()
	fmt.Fprintln(tw, "FINISHED\tEVENT ID\tDELIVERY ID\tEVENT TYPE\tSTATE\tATTEMPTS\tLAST STATUS\tLAST ERROR\tHELD")
	for _, f := range r.JSON200.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", when(f.FinishedAt), f.EventId, cell(f.DeliveryId), cell(f.EventType), f.State,
			f.Attempts, f.MaxAttempts, orDash(f.LastStatus), orDash(f.LastError), orDash(f.Held))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := r.JSON200.NextCursor; n != nil {
		fmt.Fprintf(a.stdout, "More: add --cursor %s\n", cell(*n))
	}
	return nil
}

// timeFlag reads a time flag as pointInTime does, or fails with a usage
// error; nil for "".
func timeFlag(c *cmdFlags, name, v string) (*time.Time, error) {
	t, err := pointInTime(v, time.Now())
	if err != nil {
		return nil, c.usageError(fmt.Errorf("--%s: %w", name, err))
	}
	if t.IsZero() {
		return nil, nil
	}
	return &t, nil
}

func apiRedeliver(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("--event ID | --sender S --target T [--state failed] [--since 2h] [--until 30m]",
		"Forward one event again to every current target of its sender (POST /v1/events/{event_id}/redeliver),\n"+
			"or a target's forwards in a state, in bulk (POST /v1/senders/{sender}/targets/{target}/redeliver).")
	var event, sender, target, state, since, until string
	c.String(&event, "event", "ID", "", "", "the event to forward again (or --sender and --target)")
	c.String(&sender, "sender", "S", "", "", "the sender's name, for a bulk redelivery")
	c.String(&target, "target", "T", "", "", "the target's name, for a bulk redelivery")
	c.String(&state, "state", "STATE", "", "failed", "bulk: the forwards in this state: failed, delivered, running or retrying")
	c.String(&since, "since", "TIME", "", "", "bulk: only forwards that reached the state at or after this time: 2h ago, or RFC 3339")
	c.String(&until, "until", "TIME", "", "", "bulk: only forwards that reached the state before this time: 30m ago, or RFC 3339")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if err := c.noArgs(); err != nil {
		return err
	}
	if event != "" {
		if sender != "" || target != "" {
			return c.usageError(errors.New("--event redelivers to every target of the event's sender (the API has no per-target redelivery of one event): leave out --sender and --target"))
		}
		return a.redeliverEvent(ctx, c, event)
	}
	if sender == "" || target == "" {
		return c.usageError(errors.New("give --event ID, or --sender and --target"))
	}
	body := api.BulkRedeliverRequest{State: api.BulkRedeliverRequestState(state)}
	var err error
	if body.Since, err = timeFlag(c, "since", since); err != nil {
		return err
	}
	if body.Until, err = timeFlag(c, "until", until); err != nil {
		return err
	}
	r, err := a.client.RedeliverTargetWithResponse(ctx, sender, target, body)
	if err != nil {
		return err
	}
	if a.json || r.JSON202 == nil {
		return a.printJSON(r.Body)
	}
	switch res := r.JSON202; {
	case res.Matched == 0:
		fmt.Fprintf(a.stdout, "matched no %s forwards of %s/%s: nothing was enqueued\n", state, cell(sender), cell(target))
	case res.AfterCurrent:
		fmt.Fprintf(a.stdout, "matched %d %s forwards of %s/%s; each is forwarded again after the current one has ended\n", res.Matched, state, cell(sender), cell(target))
	default:
		fmt.Fprintf(a.stdout, "matched %d %s forwards of %s/%s; they are forwarded again in the background\n", res.Matched, state, cell(sender), cell(target))
	}
	return nil
}

// redeliverEvent is `hookgate api redeliver --event ID`.
func (a *apiRun) redeliverEvent(ctx context.Context, c *cmdFlags, event string) error {
	id, err := uuidArg(c, event)
	if err != nil {
		return err
	}
	r, err := a.client.RedeliverEventWithResponse(ctx, id)
	if err != nil {
		return err
	}
	if a.json || r.JSON202 == nil {
		return a.printJSON(r.Body)
	}
	fmt.Fprintf(a.stdout, "event %s (%s %s):\n", r.JSON202.EventId, cell(r.JSON202.Sender), cell(r.JSON202.DeliveryId))
	tw := a.table()
	fmt.Fprintln(tw, "  TARGET\tJOB\tOUTCOME")
	for _, f := range r.JSON202.Forwards {
		outcome := "enqueued"
		switch {
		case f.AlreadyPending:
			outcome = "already waiting for an attempt: nothing enqueued"
		case f.AfterCurrent:
			outcome = "enqueued after job " + orDash(f.CurrentJobId) + ", under way"
		case f.OrderKey != nil && f.InPlace != nil && *f.InPlace:
			outcome = "tried again in its place: it held ordering key " + cell(*f.OrderKey)
		case f.OrderKey != nil && f.QueuedBehind != nil:
			outcome = fmt.Sprintf("queued after ordering key %s's forwards (%d before it)", cell(*f.OrderKey), *f.QueuedBehind)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", cell(f.Target), f.JobId, outcome)
	}
	return tw.Flush()
}

func apiBlocked(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("--sender S --target T [--limit N]",
		"List an ordered target's keys that a forward which failed for good holds, oldest first, with how many forwards wait behind it\n"+
			"(GET /v1/senders/{sender}/targets/{target}/blocked). Redeliver that event, or skip it, to let the key go on.")
	var (
		sender, target string
		limit          int
	)
	c.String(&sender, "sender", "S", "", "", "the sender's name (required)")
	c.String(&target, "target", "T", "", "", "the target's name (required)")
	c.fs.IntVar(&limit, "limit", 100, "")
	c.row("limit", "N", "", "100", "the most keys listed, 1 to 500")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if err := errors.Join(c.noArgs(), required(c, "sender", sender, "target", target)); err != nil {
		return err
	}
	r, err := a.client.ListBlockedKeysWithResponse(ctx, sender, target, &api.ListBlockedKeysParams{Limit: &limit})
	if err != nil {
		return err
	}
	if a.json || r.JSON200 == nil {
		return a.printJSON(r.Body)
	}
	if len(r.JSON200.Items) == 0 {
		fmt.Fprintf(a.stdout, "%s/%s: no key is blocked\n", cell(sender), cell(target))
		return nil
	}
	tw := a.table()
	fmt.Fprintln(tw, "KEY\tBLOCKED BY\tSINCE\tWAITING")
	for _, k := range r.JSON200.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", cell(k.Key), k.EventId, when(&k.BlockedAt), k.Waiting)
	}
	return tw.Flush()
}

func apiSkip(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("--sender S --target T --event ID",
		"Skip the forward of an event that failed for good and holds its ordering key: it stays failed, and the key's next forward goes\n"+
			"(POST /v1/senders/{sender}/targets/{target}/forwards/{event_id}/skip).")
	var sender, target, event string
	c.String(&sender, "sender", "S", "", "", "the sender's name (required)")
	c.String(&target, "target", "T", "", "", "the target's name (required)")
	c.String(&event, "event", "ID", "", "", "the event ID of the forward that holds its key (required)")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if err := errors.Join(c.noArgs(), required(c, "sender", sender, "target", target, "event", event)); err != nil {
		return err
	}
	id, err := uuid.Parse(event)
	if err != nil {
		return c.usageError(fmt.Errorf("--event: %q is not an event ID (a UUID)", event))
	}
	r, err := a.client.SkipForwardWithResponse(ctx, sender, target, id)
	if err != nil {
		return err
	}
	if a.json || r.JSON200 == nil {
		return a.printJSON(r.Body)
	}
	k := r.JSON200
	fmt.Fprintf(a.stdout, "skipped %s to %s/%s: ordering key %s goes on with the next of its %d waiting forwards\n",
		k.EventId, cell(k.Sender), cell(k.Target), cell(k.Key), k.Released)
	return nil
}

func apiPause(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("--sender S --target T [--reason TEXT] [--until 2h|RFC3339]",
		"Hold a target's forwards in every process until it is resumed, or until --until (POST /v1/senders/{sender}/targets/{target}/pause).")
	var sender, target, reason, until string
	c.String(&sender, "sender", "S", "", "", "the sender's name (required)")
	c.String(&target, "target", "T", "", "", "the target's name (required)")
	c.String(&reason, "reason", "TEXT", "", "", "why, for the other operators (at most 200 characters)")
	c.String(&until, "until", "TIME", "", "", "resume by itself then: a duration from now (2h) or an RFC 3339 time")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if err := errors.Join(c.noArgs(), required(c, "sender", sender, "target", target)); err != nil {
		return err
	}
	var body api.PauseRequest
	if reason != "" {
		body.Reason = &reason
	}
	if until != "" {
		t, err := futureTime(until, time.Now())
		if err != nil {
			return c.usageError(fmt.Errorf("--until: %w", err))
		}
		body.Until = &t
	}
	r, err := a.client.PauseTargetWithResponse(ctx, sender, target, body)
	if err != nil {
		return err
	}
	return a.printPause(r.Body, r.JSON200)
}

func apiResume(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("--sender S --target T", "Let a paused target's held forwards go, in the order they were accepted (POST /v1/senders/{sender}/targets/{target}/resume).")
	var sender, target string
	c.String(&sender, "sender", "S", "", "", "the sender's name (required)")
	c.String(&target, "target", "T", "", "", "the target's name (required)")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if err := errors.Join(c.noArgs(), required(c, "sender", sender, "target", target)); err != nil {
		return err
	}
	r, err := a.client.ResumeTargetWithResponse(ctx, sender, target)
	if err != nil {
		return err
	}
	return a.printPause(r.Body, r.JSON200)
}

// printPause writes a target's pause as pause and resume answer it.
func (a *apiRun) printPause(body []byte, p *api.TargetPause) error {
	if a.json || p == nil {
		return a.printJSON(body)
	}
	if !p.Paused {
		fmt.Fprintf(a.stdout, "%s/%s is not paused: its forwards go as they are due\n", cell(p.Sender), cell(p.Target))
		return nil
	}
	line := fmt.Sprintf("%s/%s is paused since %s", cell(p.Sender), cell(p.Target), when(p.Since))
	if p.Until != nil {
		line += " until " + when(p.Until)
	}
	if p.Reason != nil && *p.Reason != "" {
		line += " (" + cell(*p.Reason) + ")"
	}
	if p.By != nil && *p.By != "" {
		line += " by " + cell(*p.By)
	}
	fmt.Fprintln(a.stdout, line+": its forwards are held in every process")
	return nil
}

// futureTime reads an RFC 3339 time, or a positive duration from now.
func futureTime(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%q: a duration must be positive (how long from now)", v)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a duration such as 2h nor an RFC 3339 time such as 2026-11-30T04:00:00Z", v)
	}
	return t, nil
}

func apiReload(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("", "Make the process that answers read hookgate.yaml again, as SIGHUP does (POST /v1/config/reload).\n"+
		"Only that process reloads; a refused file leaves its running configuration serving (exit status 1).")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if err := c.noArgs(); err != nil {
		return err
	}
	r, err := a.client.ReloadConfigWithResponse(ctx)
	if err != nil {
		return err
	}
	if a.json || r.JSON200 == nil {
		return a.printJSON(r.Body)
	}
	res := r.JSON200
	if !res.Changed {
		fmt.Fprintf(a.stdout, "reloaded: nothing changed (hash %s)\n", cell(res.Hash))
		return nil
	}
	fmt.Fprintf(a.stdout, "reloaded: hash %s (was %s)\n", cell(res.Hash), cell(res.PreviousHash))
	list := func(what string, names []string) {
		if len(names) > 0 {
			fmt.Fprintf(a.stdout, "  %s: %s\n", what, cell(strings.Join(names, ", ")))
		}
	}
	list("senders added", res.Senders.Added)
	list("senders removed", res.Senders.Removed)
	for _, s := range res.Senders.Changed {
		list("sender "+s.Sender+" changed", s.Fields)
	}
	refs := func(what string, ts []api.TargetRef) {
		var names []string
		for _, t := range ts {
			names = append(names, t.Sender+"/"+t.Target)
		}
		list(what, names)
	}
	refs("targets added", res.Targets.Added)
	refs("targets removed", res.Targets.Removed)
	for _, t := range res.Targets.Changed {
		list("target "+t.Sender+"/"+t.Target+" changed", t.Fields)
	}
	for _, k := range res.Kept {
		fmt.Fprintf(a.stdout, "  kept until a restart: %s (running %s, file %s)\n", cell(k.Setting), cell(k.Running), cell(k.File))
	}
	return nil
}

func apiAudit(ctx context.Context, a *apiRun, args []string) error {
	c := a.flags("[--action A] [--token-name NAME] [--limit N] [--cursor C]", "List the audit trail, newest first: each operator action with its token's name, client address and outcome (GET /v1/audit).")
	var action, token, cursor string
	var limit int
	c.String(&action, "action", "A", "", "", "only this action: sign-in, redeliver, redeliver-bulk, pause, resume, reload, …")
	c.String(&token, "token-name", "NAME", "", "", "only the actions of the token of this name (admin for the admin token)")
	c.fs.IntVar(&limit, "limit", 50, "")
	c.row("limit", "N", "", "50", "the most rows listed, 1 to 500")
	c.String(&cursor, "cursor", "C", "", "", "the page after the one that printed this cursor")
	if done, err := a.parse(c, args); done || err != nil {
		return err
	}
	if err := c.noArgs(); err != nil {
		return err
	}
	p := &api.ListAuditParams{Limit: &limit}
	if action != "" {
		p.Action = &action
	}
	if token != "" {
		p.Token = &token
	}
	if cursor != "" {
		p.Cursor = &cursor
	}
	r, err := a.client.ListAuditWithResponse(ctx, p)
	if err != nil {
		return err
	}
	if a.json || r.JSON200 == nil {
		return a.printJSON(r.Body)
	}
	tw := a.table()
	fmt.Fprintln(tw, "AT\tTOKEN\tCLIENT\tACTION\tSENDER\tTARGET\tEVENT ID\tOUTCOME")
	for _, e := range r.JSON200.Items {
		ev := ""
		if e.EventId != nil {
			ev = e.EventId.String()
		}
		outcome := string(e.Outcome)
		if e.Detail != nil && *e.Detail != "" {
			outcome += " (" + *e.Detail + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", when(&e.At), cell(e.Token), cellp(e.Client), cell(e.Action),
			cellp(e.Sender), cellp(e.Target), cell(ev), cell(outcome))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := r.JSON200.NextCursor; n != nil {
		fmt.Fprintf(a.stdout, "More: add --cursor %s\n", cell(*n))
	}
	return nil
}
