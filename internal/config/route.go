package config

import (
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"
)

// EventType names where a request carries its event type: a header, or a
// JSON pointer (RFC 6901) into a JSON body. At most one is set; neither
// (generic senders by default) means every event has the empty type.
type EventType struct {
	Header      string `yaml:"header" validate:"excluded_with=JSONPointer,omitempty,headername"`
	JSONPointer string `yaml:"json_pointer" validate:"omitempty,jsonpointer"`
}

// Condition is one condition of a target's match list: the value of a
// request header, or of a JSON pointer into the body, must be one of In.
// Exactly one of Header and JSONPointer is set.
type Condition struct {
	Header      string `yaml:"header" validate:"required_without=JSONPointer,excluded_with=JSONPointer,omitempty,headername"`
	JSONPointer string `yaml:"json_pointer" validate:"omitempty,jsonpointer"`
	// In are the values that satisfy the condition (alternatives). A JSON
	// scalar is compared as its JSON text without quotes: "true", "42",
	// "null", or a string's decoded value.
	In []string `yaml:"in" validate:"required,min=1"`
}

// MaxEventTypeBytes is the longest event type stored; a longer one (or one
// that is not valid UTF-8 or has control characters) counts as no event type.
const MaxEventTypeBytes = 255

// Label values of the event_type label of hookgate_deliveries_total besides
// the patterns of a sender's targets (EventTypeLabel).
const (
	EventTypeLabelNone  = "none"
	EventTypeLabelOther = "other"
)

// plan is what ingest reads from a request to decide a delivery, computed
// once per sender by Parse: the JSON pointers of one Extract call and which
// value is which, and the targets' routes.
type plan struct {
	ptrs []Pointer
	// idSlot, typeSlot: index in ptrs of the delivery ID and event type
	// pointers; -1 when they are headers (or there is no event type).
	idSlot, typeSlot int
	// slackTypeSlot, slackEventSlot: the Slack preset's /type and
	// /event/type (typeSlot is then -1); -1 otherwise.
	slackTypeSlot, slackEventSlot int
	// challengeSlot is /challenge, for Slack's url_verification; -1
	// otherwise.
	challengeSlot int
	typeHeader    string
	routes        []route
	// allMatch: no target has event_types or match, so every target gets
	// every event.
	allMatch bool
	// labels are the event_type label values: each exact type and each
	// prefix pattern of the targets' event_types.
	exactLabels map[string]bool
	prefixes    []string // the prefixes (without "*") of those patterns
}

// route is a target's routing rule.
type route struct {
	name     string
	anyType  bool            // no event_types, or "*": every event type
	exact    map[string]bool // event types named exactly
	prefixes []string        // prefixes of "p*" patterns
	conds    []cond
}

// cond is a compiled Condition.
type cond struct {
	header string // canonical; "" for a JSON pointer
	slot   int    // index in plan.ptrs
	in     []string
}

// slotOf returns the index of the pointer p in ptrs, appending it if it is
// not there yet.
func slotOf(ptrs *[]Pointer, p Pointer) int {
	for i, q := range *ptrs {
		if pointerEqual(p, q) {
			return i
		}
	}
	*ptrs = append(*ptrs, p)
	return len(*ptrs) - 1
}

func pointerEqual(a, b Pointer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkPattern returns why p is not a valid event_types pattern, or "".
func checkPattern(p string) string {
	switch {
	case p == "":
		return "is empty: name an event type such as invoice.paid, or a prefix such as invoice.*"
	case len(strings.TrimSuffix(p, "*")) > MaxEventTypeBytes:
		return fmt.Sprintf("is longer than %d bytes", MaxEventTypeBytes)
	case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
		return `has a "*" that is not at its end: "*" may only end a pattern (a prefix, as in invoice.*)`
	case !validEventType(p):
		return "must be valid UTF-8 without control characters"
	}
	return ""
}

// CheckEventTypeFilter returns why f cannot filter a list by event type, or
// "": f is "" (no filter), an event type, or a prefix ending in "*".
func CheckEventTypeFilter(f string) string {
	if f == "" {
		return ""
	}
	return checkPattern(f)
}

// validEventType reports whether s may be stored as an event type: at most
// MaxEventTypeBytes of valid UTF-8 without control characters.
func validEventType(s string) bool {
	if len(s) > MaxEventTypeBytes || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// buildPlan checks the sender's event type location and routes and
// compiles them. Its errors start with the field at fault, relative to the
// sender.
func buildPlan(s *Sender) error {
	p := plan{idSlot: -1, typeSlot: -1, slackTypeSlot: -1, slackEventSlot: -1, challengeSlot: -1}
	if s.DeliveryIDPointer != nil {
		p.idSlot = slotOf(&p.ptrs, s.DeliveryIDPointer)
	}
	et := s.EventType
	switch {
	case et.Header != "":
		p.typeHeader = http.CanonicalHeaderKey(et.Header)
	case et.JSONPointer != "":
		ptr, err := ParsePointer(et.JSONPointer)
		if err != nil {
			return fmt.Errorf("event_type.json_pointer: %w", err)
		}
		p.typeSlot = slotOf(&p.ptrs, ptr)
	case s.slackEventType:
		p.slackTypeSlot = slotOf(&p.ptrs, Pointer{"type"})
		p.slackEventSlot = slotOf(&p.ptrs, Pointer{"event", "type"})
	}
	if s.Preset == "slack" || s.SignatureScheme() == "slack" {
		p.challengeSlot = slotOf(&p.ptrs, Pointer{"challenge"})
		if p.slackTypeSlot < 0 {
			p.slackTypeSlot = slotOf(&p.ptrs, Pointer{"type"})
		}
	}
	p.allMatch = true
	p.exactLabels = map[string]bool{}
	for i := range s.Forward {
		t := &s.Forward[i]
		r := route{name: t.Name, anyType: t.EventTypes == nil}
		if t.EventTypes != nil && len(t.EventTypes) == 0 {
			return fmt.Errorf("forward[%d].event_types: lists no event type: leave event_types out for every event", i)
		}
		for j, pat := range t.EventTypes {
			if why := checkPattern(pat); why != "" {
				return fmt.Errorf("forward[%d].event_types[%d]: %s", i, j, why)
			}
			if prefix, ok := strings.CutSuffix(pat, "*"); ok {
				if prefix == "" {
					r.anyType = true
				}
				r.prefixes = append(r.prefixes, prefix)
				if prefix != "" && !contains(p.prefixes, prefix) {
					p.prefixes = append(p.prefixes, prefix)
				}
				continue
			}
			if r.exact == nil {
				r.exact = map[string]bool{}
			}
			r.exact[pat] = true
			p.exactLabels[pat] = true
		}
		for j, c := range t.Match {
			rc := cond{slot: -1, in: c.In}
			if c.Header != "" {
				rc.header = http.CanonicalHeaderKey(c.Header)
			} else {
				ptr, err := ParsePointer(c.JSONPointer)
				if err != nil {
					return fmt.Errorf("forward[%d].match[%d].json_pointer: %w", i, j, err)
				}
				rc.slot = slotOf(&p.ptrs, ptr)
			}
			r.conds = append(r.conds, rc)
		}
		if !r.anyType || len(r.conds) > 0 {
			p.allMatch = false
		}
		s.targetNames = append(s.targetNames, t.Name)
		p.routes = append(p.routes, r)
	}
	if len(p.ptrs) > MaxExtractPointers {
		return fmt.Errorf("forward: the delivery ID, event type and match conditions read %d JSON pointers, at most %d", len(p.ptrs), MaxExtractPointers)
	}
	s.plan = p
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Inspection is what ingest read from one request with Sender.Inspect.
type Inspection struct {
	// Values are the JSON values at the sender's pointers (Sender.Pointers);
	// nil when the sender reads none or the body is not JSON.
	Values []Value
	// JSONErr is the error of reading the body as JSON (wrapping
	// ErrSyntax); nil when it is JSON or the sender reads no pointer.
	JSONErr error
}

// Pointers returns the JSON pointers ingest resolves in a request body, in
// one Extract call: the delivery ID's, the event type's, the match
// conditions' (each once), and for Slack /type and /challenge. Empty when
// the sender reads nothing from the body. The slice is shared: do not
// modify it.
func (s *Sender) Pointers() []Pointer { return s.plan.ptrs }

// Inspect reads body once, with one Extract call resolving every pointer
// the sender needs (none at all when it needs none, so a sender that reads
// only headers never parses its bodies).
func (s *Sender) Inspect(body []byte) Inspection {
	if len(s.plan.ptrs) == 0 {
		return Inspection{}
	}
	vals, err := Extract(body, s.plan.ptrs)
	return Inspection{Values: vals, JSONErr: err}
}

// value returns the value at slot, the zero Value when there is none.
func (in *Inspection) value(slot int) Value {
	if slot < 0 || slot >= len(in.Values) {
		return Value{}
	}
	return in.Values[slot]
}

// DeliveryIDValue returns the value at the sender's delivery ID pointer; the
// zero Value (Found false) when the sender's delivery ID is a header or the
// body is not JSON (see JSONErr).
func (s *Sender) DeliveryIDValue(in *Inspection) Value { return in.value(s.plan.idSlot) }

// SlackChallenge returns the challenge of a Slack url_verification request
// (which is answered with it and not recorded), or false: always false for
// a sender that is not Slack's.
func (s *Sender) SlackChallenge(in *Inspection) (string, bool) {
	if s.plan.challengeSlot < 0 {
		return "", false
	}
	typ, ch := in.value(s.plan.slackTypeSlot), in.value(s.plan.challengeSlot)
	if typ.Kind != KindString || typ.Str != "url_verification" || (ch.Found && ch.Kind != KindString) {
		return "", false
	}
	return ch.Str, true
}

// EventTypeOf returns the delivery's event type from where the sender's
// configuration says it is: "" when there is none (no location configured,
// header or value missing, a JSON value that is not a string or number, a
// body that is not JSON), and "" too for a value that cannot be an event
// type (longer than MaxEventTypeBytes, invalid UTF-8, control characters).
// A header sent more than once counts by its first value. For the Slack
// preset it is /event/type when /type is event_callback, else /type.
func (s *Sender) EventTypeOf(h http.Header, in *Inspection) string {
	var et string
	switch p := &s.plan; {
	case p.typeHeader != "":
		if v := h[p.typeHeader]; len(v) > 0 {
			et = v[0]
		}
	case p.typeSlot >= 0:
		et = scalarText(in.value(p.typeSlot), false)
	case s.slackEventType:
		et = scalarText(in.value(p.slackTypeSlot), false)
		if et == "event_callback" {
			et = scalarText(in.value(p.slackEventSlot), false)
		}
	}
	if !validEventType(et) {
		return ""
	}
	return et
}

// scalarText returns a JSON string's value or a number's text; with all,
// also "true", "false" and "null". "" for anything else.
func scalarText(v Value, all bool) string {
	switch {
	case v.Kind == KindString || v.Kind == KindNumber:
		return v.Str
	case all && v.Kind == KindBool:
		return v.Str
	case all && v.Kind == KindNull:
		return "null"
	}
	return ""
}

// Route returns the names of the sender's targets that the delivery goes
// to, in configuration order: those whose event_types match eventType (or
// that have none) and all of whose match conditions hold for the request's
// headers h and the body's values in in. nil when none matches. When every
// target matches, the returned slice is TargetNames() (shared: do not
// modify it); otherwise it is new.
func (s *Sender) Route(eventType string, h http.Header, in *Inspection) []string {
	p := &s.plan
	if p.allMatch {
		return s.targetNames
	}
	var out []string
	missed := false
	for i := range p.routes {
		ok := p.routes[i].matches(eventType, h, in)
		switch {
		case ok && missed:
			out = append(out, p.routes[i].name)
		case !ok && !missed:
			missed = true
			out = append(make([]string, 0, len(p.routes)-1), s.targetNames[:i]...)
		}
	}
	if !missed {
		return s.targetNames
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (r *route) matches(eventType string, h http.Header, in *Inspection) bool {
	if !r.anyType && !r.exact[eventType] {
		ok := false
		for _, pre := range r.prefixes {
			if strings.HasPrefix(eventType, pre) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	for i := range r.conds {
		if !r.conds[i].holds(h, in) {
			return false
		}
	}
	return true
}

func (c *cond) holds(h http.Header, in *Inspection) bool {
	if c.header != "" {
		for _, v := range h[c.header] {
			if contains(c.in, v) {
				return true
			}
		}
		return false
	}
	v := in.value(c.slot)
	if !v.Found || v.Kind == KindObject || v.Kind == KindArray {
		return false
	}
	return contains(c.in, scalarText(v, true))
}

// EventTypeLabel returns the value of the event_type label of
// hookgate_deliveries_total for eventType, from a set bounded by the
// configuration: eventType itself when a target of the sender names it
// exactly in event_types; else the first prefix pattern of those targets
// that it matches ("invoice.*"); else "none" for the empty event type and
// "other" for any other. A sender has at most (patterns in its targets'
// event_types) + 2 label values.
func (s *Sender) EventTypeLabel(eventType string) string {
	p := &s.plan
	if eventType == "" {
		return EventTypeLabelNone
	}
	if p.exactLabels[eventType] {
		return eventType
	}
	for _, pre := range p.prefixes {
		if strings.HasPrefix(eventType, pre) {
			return pre + "*"
		}
	}
	return EventTypeLabelOther
}
