package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/hookgate/hookgate/internal/rules"
	"github.com/hookgate/hookgate/internal/signature"
)

// EventType names where a request carries its event type: a header, or
// an RFC 6901 JSON pointer into a JSON body. At most one is set. With
// neither, every event has the empty type.
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
	// In are the values that satisfy the condition. A JSON scalar is
	// compared as its JSON text without quotes, such as "42", or as a
	// string's decoded value.
	In []string `yaml:"in" validate:"required,min=1"`
}

// MaxEventTypeBytes is the longest event type stored. A longer one counts
// as no event type, as does invalid UTF-8 or a control character.
const MaxEventTypeBytes = 255

// Values of the event_type label of hookgate_deliveries_total, besides the
// patterns of a sender's targets.
const (
	EventTypeLabelNone  = "none"
	EventTypeLabelOther = "other"
)

// checkPattern returns why p is not a valid event_types pattern, or "".
func checkPattern(p string) string {
	switch {
	case p == "":
		return "is empty: name an event type such as invoice.paid, or a prefix such as invoice.*"
	case len(strings.TrimSuffix(p, "*")) > MaxEventTypeBytes:
		return fmt.Sprintf("is longer than %d bytes", MaxEventTypeBytes)
	case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
		return `has a "*" that is not at its end: "*" may only end a pattern (a prefix, as in invoice.*)`
	case !ValidEventType(p):
		return "must be valid UTF-8 without control characters"
	}
	return ""
}

// CheckEventTypeFilter returns why f cannot filter a list by event type, or
// "". A valid f is "", an event type, or a prefix ending in "*".
func CheckEventTypeFilter(f string) string {
	if f == "" {
		return ""
	}
	return checkPattern(f)
}

// ValidEventType reports whether s may be stored as an event type: at most
// MaxEventTypeBytes of valid UTF-8 without control characters.
func ValidEventType(s string) bool {
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

// check checks what the validator's tags cannot say about a sender, such
// as its secrets against its signature check. It decodes its targets'
// signing secrets and records their names. Its errors start with the
// field at fault, relative to the sender, and never contain a secret.
func check(s *Sender) error {
	for i := range s.Forward {
		t := &s.Forward[i]
		t.answerSecrets = t.workOutAnswerSecrets()
		if t.SigningSecret == "" {
			continue
		}
		k, err := signature.DecodeStandardSecret(t.SigningSecret)
		if err != nil {
			return fmt.Errorf("forward[%d].signing_secret: is not a Standard Webhooks secret (whsec_ followed by base64)", i)
		}
		t.SigningKey = k
	}
	if err := checkSignature(s); err != nil {
		return err
	}
	if err := checkHandshakeSigned(s); err != nil {
		return err
	}
	if err := checkSecretStrength(s); err != nil {
		return err
	}
	if s.PublicURL != "" && strings.ContainsAny(s.PublicURL, "?#") {
		return errors.New("public_url: must not have a query or fragment: the request's query string is appended to it")
	}
	if s.VerifyToken != "" && !slices.Contains(s.Handshakes(), HandshakeMetaSubscribe) {
		return errors.New("verify_token: is only used by the meta preset's subscription check")
	}
	for i := range s.Forward {
		t := &s.Forward[i]
		if err := checkTargetURL(t.URL, fmt.Sprintf("forward[%d].url", i), s.Name+", target "+t.Name); err != nil {
			return err
		}
		if err := checkBrokerTarget(t, fmt.Sprintf("forward[%d]", i), s.Name+", target "+t.Name); err != nil {
			return err
		}
		if t.Burst > 0 && t.Rate.IsZero() {
			return fmt.Errorf("forward[%d].burst: is only used with rate: set rate (such as 50/s) or leave burst out", i)
		}
		if o := t.Ordering; o != nil {
			n := 0
			for _, set := range []bool{o.Header != "", o.JSONPointer != "", o.Constant != ""} {
				if set {
					n++
				}
			}
			if n != 1 {
				return fmt.Errorf("forward[%d].ordering: set exactly one of header, json_pointer or constant (the key whose forwards go one at a time)", i)
			}
			if o.OnFailure == "" {
				o.OnFailure = OnFailureHold
			}
			if o.Header != "" && !storesHeader(s, o.Header) {
				return fmt.Errorf("forward[%d].ordering.header: %s is not stored (store_headers, drop_headers): a redelivery reads the key from the stored event, and would go unordered", i, o.Header)
			}
		}
		if t.EventTypes != nil && len(t.EventTypes) == 0 {
			return fmt.Errorf("forward[%d].event_types: lists no event type: leave event_types out for every event", i)
		}
		for j, pat := range t.EventTypes {
			if why := checkPattern(pat); why != "" {
				return fmt.Errorf("forward[%d].event_types[%d]: %s", i, j, why)
			}
		}
		if err := compileRules(t, fmt.Sprintf("forward[%d]", i), s.Name+", target "+t.Name); err != nil {
			return err
		}
		s.targetNames = append(s.targetNames, t.Name)
	}
	return nil
}

// storesHeader reports whether s's store_headers and drop_headers keep the
// header name on its events.
func storesHeader(s *Sender, name string) bool {
	in := func(list []string) bool {
		for _, h := range list {
			if strings.EqualFold(h, name) {
				return true
			}
		}
		return false
	}
	if len(s.StoreHeaders) > 0 {
		return in(s.StoreHeaders)
	}
	return !in(s.DropHeaders)
}

// compileRules compiles a target's filter and transform. An error names
// the field and gives CEL's message, with the line:column in the
// expression.
func compileRules(t *Target, field, where string) error {
	if t.RuleCostLimit > rules.MaxCostLimit {
		return fmt.Errorf("%s.rule_cost_limit (%s): is above the maximum of %d: a rule runs on every delivery", field, where, rules.MaxCostLimit)
	}
	var err error
	if t.FilterExpr != "" {
		if t.Filter, err = rules.CompileFilter(t.FilterExpr, t.RuleCostLimit); err != nil {
			return ruleError(field, where, err)
		}
	}
	if t.TransformExpr != "" || t.TransformHeadersExpr != "" {
		if t.Transform, err = rules.CompileTransform(t.TransformExpr, t.TransformHeadersExpr, t.RuleCostLimit); err != nil {
			return ruleError(field, where, err)
		}
	}
	return nil
}

// ruleCompileError is a rule's compile error. It quotes the expression,
// which ${VAR} may have filled in, so [Parse] hides the values it expanded.
type ruleCompileError struct{ msg string }

func (e *ruleCompileError) Error() string { return e.msg }

func ruleError(field, where string, err error) error {
	var re *rules.Error
	if errors.As(err, &re) {
		return &ruleCompileError{fmt.Sprintf("%s.%s (%s): %s", field, re.Rule, where, re.Msg)}
	}
	return &ruleCompileError{fmt.Sprintf("%s (%s): %v", field, where, err)}
}
