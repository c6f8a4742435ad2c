package rules

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
)

// Input is what a rule sees of a delivery.
type Input struct {
	Sender, DeliveryID, EventType string
	Headers                       http.Header
	Body                          []byte
	ContentType                   string
	// Parsed, when not nil, is Body as an earlier activation parsed it
	// ([Activation.Parsed]): the body is not parsed again. It is used
	// only if it was parsed from these very bytes.
	Parsed *Parsed
}

// Parsed is a body as rules read it, parsed once. It never changes, and
// is safe for concurrent use.
type Parsed struct {
	src  []byte
	tree any
	val  ref.Val
}

// Parsed returns the body as a's rules parsed it, for the activation of
// another rule on the same bytes ([Input.Parsed]). It is nil when no rule
// read the body, or when the body is not JSON.
func (a *Activation) Parsed() *Parsed {
	return a.shared.Load()
}

// Activation is one delivery's variables, built once and shared by
// every target's rules. It parses Body as JSON at most once, lazily,
// only when a rule reads body; it builds the headers map the same way.
// It is safe for concurrent use.
type Activation struct {
	in Input

	bodyOnce sync.Once
	body     ref.Val // nil when Body is not JSON
	tree     any     // body as decoded, for scrub
	parsed   bool    // the body was parsed (for tests)
	shared   atomic.Pointer[Parsed]

	hdrOnce sync.Once
	hdr     ref.Val
}

var _ interpreter.Activation = (*Activation)(nil)

// NewActivation returns the variables of one delivery. It reads in but
// does not copy it: in.Body and in.Headers must not change while rules
// run.
func NewActivation(in Input) *Activation {
	return &Activation{in: in}
}

// ResolveName implements CEL's interpreter.Activation.
func (a *Activation) ResolveName(name string) (any, bool) {
	switch name {
	case "body":
		b := a.jsonBody()
		return b, b != nil
	case "raw":
		return types.Bytes(a.in.Body), true
	case "headers":
		a.hdrOnce.Do(func() {
			m := make(map[string]string, len(a.in.Headers))
			// In key order, so that of two names that differ only in
			// case the same one always wins.
			for _, k := range slices.Sorted(maps.Keys(a.in.Headers)) {
				lk := strings.ToLower(k)
				if _, seen := m[lk]; !seen && len(a.in.Headers[k]) > 0 {
					m[lk] = a.in.Headers[k][0]
				}
			}
			a.hdr = types.DefaultTypeAdapter.NativeToValue(m)
		})
		return a.hdr, true
	case "event_type":
		return types.String(a.in.EventType), true
	case "sender":
		return types.String(a.in.Sender), true
	case "delivery_id":
		return types.String(a.in.DeliveryID), true
	}
	return nil, false
}

// Parent implements CEL's interpreter.Activation: there is none.
func (a *Activation) Parent() interpreter.Activation { return nil }

// jsonBody parses the body once; nil when it is not one JSON value.
func (a *Activation) jsonBody() ref.Val {
	a.bodyOnce.Do(func() {
		a.parsed = true
		if p := a.in.Parsed; p != nil && sameBytes(p.src, a.in.Body) {
			a.tree, a.body = p.tree, p.val
			a.shared.Store(p)
			return
		}
		v, err := parseJSON(a.in.Body)
		if err != nil {
			return
		}
		a.tree = v
		a.body = types.DefaultTypeAdapter.NativeToValue(v)
		a.shared.Store(&Parsed{src: a.in.Body, tree: a.tree, val: a.body})
	})
	return a.body
}

var errNotJSON = errors.New("not one JSON value")

// sameBytes reports whether a and b are the same bytes in memory, not
// only equal ones.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
