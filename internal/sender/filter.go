package sender

import (
	"errors"
	"net/http"

	"github.com/hookgate/hookgate/internal/events"
	"github.com/hookgate/hookgate/internal/rules"
)

// filters are the filters of a sender's targets, by target name; nil when
// no target has one. A sender without filters never builds an activation.
type filters map[string]*rules.Filter

// planFilters returns the filters of the sender's targets, or nil.
func planFilters(s *Sender) filters {
	var fs filters
	for i := range s.Forward {
		if f := s.Forward[i].Filter; f != nil {
			if fs == nil {
				fs = filters{}
			}
			fs[s.Forward[i].Name] = f
		}
	}
	return fs
}

// filter returns the targets of p whose filter, if any, passes on p and
// the request headers h, of the sender's filters fs. The
// delivery's variables are built once, when the first routed target with
// a filter needs them, and shared by the others. A filter that fails to
// evaluate drops its target too: the error is returned, for the event to
// record. targets is returned itself when no target is dropped.
func (s *Sender) filter(fs filters, p *Prepared, h http.Header) ([]string, []events.RuleError) {
	var (
		act  *rules.Activation
		out  []string
		errs []events.RuleError
	)
	for i, name := range p.Targets {
		f := fs[name]
		keep := true
		if f != nil {
			if act == nil {
				act = rules.NewActivation(rules.Input{Sender: s.Name, DeliveryID: p.DeliveryID, EventType: p.EventType,
					Headers: h, Body: p.Body, ContentType: h.Get("Content-Type")})
			}
			ok, err := f.Eval(act)
			if err != nil {
				errs = append(errs, ruleError(name, err))
			}
			keep = ok && err == nil
		}
		switch {
		case !keep && out == nil:
			out = append(make([]string, 0, len(p.Targets)-1), p.Targets[:i]...)
		case keep && out != nil:
			out = append(out, name)
		}
	}
	if act != nil {
		p.Parsed = act.Parsed()
	}
	if out == nil {
		return p.Targets, errs
	}
	if len(out) == 0 {
		return nil, errs
	}
	return out, errs
}

// ruleError is a filter's evaluation error as the event records it: CEL's
// message, which [rules] keeps free of the delivery's values.
func ruleError(target string, err error) events.RuleError {
	e := events.RuleError{Target: target, Rule: "filter", Error: err.Error()}
	if re, ok := errors.AsType[*rules.Error](err); ok {
		e.Rule, e.Error = re.Rule, re.Msg
	}
	return e
}
