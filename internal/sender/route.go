package sender

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/jsonptr"
)

// plan is what ingest reads from a request to decide a delivery. [Compile]
// computes it once per sender: the JSON pointers of one Extract call, which
// value is which, and the targets' routes.
type plan struct {
	ptrs []jsonptr.Pointer
	// idSlot, typeSlot: index in ptrs of the delivery ID and event type
	// pointers; -1 when they are headers (or there is no event type).
	idSlot, typeSlot int
	// envelopeWhen, envelopeSlot: when the event type is envelopeWhen, it
	// is the value at envelopeSlot instead (config.Envelope); envelopeSlot
	// is -1 when the sender has no envelope.
	envelopeWhen string
	envelopeSlot int
	// handshakes are the handshakes the sender answers on POST, with the
	// slots of the values they read.
	handshakes  []handshake
	typeHeader  string
	targetNames []string
	routes      []route
	// allMatch: no target has event_types or match, so every target gets
	// every event.
	allMatch bool
	// labels are the event_type label values: each exact type and each
	// prefix pattern of the targets' event_types.
	exactLabels map[string]bool
	prefixes    []string // the prefixes (without "*") of those patterns
	// filters are the targets' filters; nil when none has one.
	filters filters
	// orders are the ordered targets' keys, by target name; nil when no
	// target is ordered.
	orders map[string]orderKey
}

// orderKey is where an ordered target's key is: a header, a slot of ptrs,
// or a constant.
type orderKey struct {
	header   string
	slot     int
	constant string
}

// route is a target's routing rule.
type route struct {
	name     string
	anyType  bool            // no event_types, or "*": every event type
	exact    map[string]bool // event types named exactly
	prefixes []string        // prefixes of "p*" patterns
	conds    []cond
}

// cond is a compiled config.Condition.
type cond struct {
	header string // canonical; "" for a JSON pointer
	slot   int    // index in plan.ptrs
	in     []string
}

// slotOf returns the index of the pointer p in ptrs, appending it if it is
// not there yet.
func slotOf(ptrs *[]jsonptr.Pointer, p jsonptr.Pointer) int {
	for i, q := range *ptrs {
		if pointerEqual(p, q) {
			return i
		}
	}
	*ptrs = append(*ptrs, p)
	return len(*ptrs) - 1
}

func pointerEqual(a, b jsonptr.Pointer) bool {
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

// parsePointer parses a pointer config.Parse validated; field names it in
// the error.
func parsePointer(field, s string) (jsonptr.Pointer, error) {
	p, err := jsonptr.ParsePointer(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return p, nil
}

// buildPlan compiles the sender's delivery ID and event type locations, its
// handshakes and its routes. Its errors start with the field at fault,
// relative to the sender.
func buildPlan(out *Sender) error {
	s := out.Sender
	p := plan{idSlot: -1, typeSlot: -1, envelopeSlot: -1}
	if ptr := s.DeliveryID.JSONPointer; ptr != "" {
		id, err := parsePointer("delivery_id.json_pointer", ptr)
		if err != nil {
			return err
		}
		p.idSlot = slotOf(&p.ptrs, id)
	}
	et := s.EventType
	switch {
	case et.Header != "":
		p.typeHeader = http.CanonicalHeaderKey(et.Header)
	case et.JSONPointer != "":
		ptr, err := parsePointer("event_type.json_pointer", et.JSONPointer)
		if err != nil {
			return err
		}
		p.typeSlot = slotOf(&p.ptrs, ptr)
	}
	if env := s.EventTypeEnvelope; env.JSONPointer != "" && p.typeSlot >= 0 {
		ptr, err := parsePointer("event_type", env.JSONPointer)
		if err != nil {
			return err
		}
		p.envelopeWhen, p.envelopeSlot = env.When, slotOf(&p.ptrs, ptr)
	}
	for _, kind := range s.Handshakes() {
		hs, err := planHandshake(kind, &p.ptrs)
		if err != nil {
			return err
		}
		if hs.kind != config.HandshakeMetaSubscribe { // a GET: CheckSubscription
			p.handshakes = append(p.handshakes, hs)
		}
	}
	p.allMatch = true
	p.exactLabels = map[string]bool{}
	for i := range s.Forward {
		t := &s.Forward[i]
		r := route{name: t.Name, anyType: t.EventTypes == nil}
		for _, pat := range t.EventTypes { // checked by config.Parse
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
				ptr, err := parsePointer(fmt.Sprintf("forward[%d].match[%d].json_pointer", i, j), c.JSONPointer)
				if err != nil {
					return err
				}
				rc.slot = slotOf(&p.ptrs, ptr)
			}
			r.conds = append(r.conds, rc)
		}
		if !r.anyType || len(r.conds) > 0 {
			p.allMatch = false
		}
		if o := t.Ordering; o != nil {
			k := orderKey{header: http.CanonicalHeaderKey(o.Header), slot: -1, constant: o.Constant}
			if o.JSONPointer != "" {
				ptr, err := parsePointer(fmt.Sprintf("forward[%d].ordering.json_pointer", i), o.JSONPointer)
				if err != nil {
					return err
				}
				k.slot = slotOf(&p.ptrs, ptr)
			}
			if p.orders == nil {
				p.orders = map[string]orderKey{}
			}
			p.orders[t.Name] = k
		}
		p.routes = append(p.routes, r)
	}
	p.targetNames = s.TargetNames()
	p.filters = planFilters(out)
	if len(p.ptrs) > jsonptr.MaxExtractPointers {
		return fmt.Errorf("forward: the delivery ID, event type and match conditions read %d JSON pointers, at most %d", len(p.ptrs), jsonptr.MaxExtractPointers)
	}
	out.plan = p
	return nil
}

// OrderKeys returns the ordering key of each of targets, in their order,
// "" for a target that is not ordered or an event without its key. It
// returns nil when none has a key. A header's key must appear once; a
// JSON key is a string or a number.
func (s *Sender) OrderKeys(targets []string, h http.Header, in *Inspection) []string {
	if s.plan.orders == nil {
		return nil
	}
	var keys []string
	for i, name := range targets {
		o, ok := s.plan.orders[name]
		if !ok {
			continue
		}
		var key string
		switch {
		case o.constant != "":
			key = o.constant
		case o.header != "":
			if vs := h.Values(o.header); len(vs) == 1 {
				key = vs[0]
			}
		default:
			if v := in.value(o.slot); v.Found && (v.Kind == jsonptr.KindString || v.Kind == jsonptr.KindNumber) {
				key = v.Str
			}
		}
		if key == "" {
			continue
		}
		key = config.OrderKey(key)
		if keys == nil {
			keys = make([]string, len(targets))
		}
		keys[i] = key
	}
	return keys
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Inspection is what [Sender.Inspect] read from one request body.
type Inspection struct {
	// Values are the JSON values at the sender's pointers. It is nil when
	// the sender reads none or the body is not JSON.
	Values []jsonptr.Value
	// JSONErr is the error of reading the body as JSON, wrapping
	// [jsonptr.ErrSyntax]. It is nil for JSON, and when no pointer is read.
	JSONErr error
}

// Pointers returns the JSON pointers ingest resolves in a request body, in
// one Extract call. They are those of the delivery ID, the event type, the
// match conditions and the handshakes, each once. The slice is shared: do
// not modify it.
func (s *Sender) Pointers() []jsonptr.Pointer { return s.plan.ptrs }

// Inspect reads body once, resolving every pointer the sender needs in one
// Extract call. A sender that reads only headers never parses its bodies.
func (s *Sender) Inspect(body []byte) Inspection {
	if len(s.plan.ptrs) == 0 {
		return Inspection{}
	}
	vals, err := jsonptr.Extract(body, s.plan.ptrs)
	return Inspection{Values: vals, JSONErr: err}
}

// value returns the value at slot, the zero Value when there is none.
func (in *Inspection) value(slot int) jsonptr.Value {
	if slot < 0 || slot >= len(in.Values) {
		return jsonptr.Value{}
	}
	return in.Values[slot]
}

// EventTypeOf returns the delivery's event type from where the sender's
// configuration says it is. It is "" when there is none, or when the value
// cannot be an event type ([config.ValidEventType]). A header sent more
// than once counts by its first value. With an envelope, as Slack's preset
// has, the type is read at the envelope's pointer when the outer type is
// the envelope's.
func (s *Sender) EventTypeOf(h http.Header, in *Inspection) string {
	var et string
	switch p := &s.plan; {
	case p.typeHeader != "":
		if v := h[p.typeHeader]; len(v) > 0 {
			et = v[0]
		}
	case p.typeSlot >= 0:
		et = scalarText(in.value(p.typeSlot), false)
		if p.envelopeSlot >= 0 && et == p.envelopeWhen {
			et = scalarText(in.value(p.envelopeSlot), false)
		}
	}
	if !config.ValidEventType(et) {
		return ""
	}
	return et
}

// scalarText returns a JSON string's value or a number's text; with all,
// also "true", "false" and "null". "" for anything else.
func scalarText(v jsonptr.Value, all bool) string {
	switch {
	case v.Kind == jsonptr.KindString || v.Kind == jsonptr.KindNumber:
		return v.Str
	case all && v.Kind == jsonptr.KindBool:
		return v.Str
	case all && v.Kind == jsonptr.KindNull:
		return "null"
	}
	return ""
}

// Route returns the names of the targets the delivery goes to, in
// configuration order. A target matches when its event_types match
// eventType, or it has none, and all its match conditions hold for the
// headers h and the values in in. Route returns nil when none matches. When
// all match, it returns the shared [config.Sender.TargetNames]: do not
// modify it.
func (s *Sender) Route(eventType string, h http.Header, in *Inspection) []string {
	p := &s.plan
	if p.allMatch {
		return p.targetNames
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
			out = append(make([]string, 0, len(p.routes)-1), p.targetNames[:i]...)
		}
	}
	if !missed {
		return p.targetNames
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
	if !v.Found || v.Kind == jsonptr.KindObject || v.Kind == jsonptr.KindArray {
		return false
	}
	return contains(c.in, scalarText(v, true))
}

// EventTypeLabel returns eventType's value of the event_type label of
// hookgate_deliveries_total. It is eventType when a target names it exactly
// in event_types, or else the first prefix pattern it matches, such as
// "invoice.*". Otherwise it is "none" for no event type and "other". So a
// sender has at most its targets' patterns plus two label values.
func (s *Sender) EventTypeLabel(eventType string) string {
	p := &s.plan
	if eventType == "" {
		return config.EventTypeLabelNone
	}
	if p.exactLabels[eventType] {
		return eventType
	}
	for _, pre := range p.prefixes {
		if strings.HasPrefix(eventType, pre) {
			return pre + "*"
		}
	}
	return config.EventTypeLabelOther
}
