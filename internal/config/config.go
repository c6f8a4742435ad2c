// Package config loads and validates hookgate.yaml. It describes the
// senders that hookgate accepts webhooks from, where each puts its delivery
// ID, and how long delivery keys are remembered.
//
// It is plain data: structs decoded from YAML, with ${VAR} expanded, the
// values of [Presets] applied and every field validated. Package sender
// compiles from it what ingest runs per request, such as signature
// verifiers, routes and the header filter.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
	"go.yaml.in/yaml/v3"

	"github.com/hookgate/hookgate/internal/jsonptr"
	"github.com/hookgate/hookgate/internal/redact"
	"github.com/hookgate/hookgate/internal/rules"
	"github.com/hookgate/hookgate/internal/signature"
)

// Defaults applied to a sender that leaves the field out.
const (
	DefaultRetention    = 168 * time.Hour
	DefaultMaxBodyBytes = 1 << 20
)

// Config is the whole of hookgate.yaml.
type Config struct {
	Senders []Sender `yaml:"senders" validate:"required,min=1,unique=Name,dive"`
}

// Sender is one webhook sender, reached at POST /webhooks/{name}.
type Sender struct {
	Name string `yaml:"name" validate:"required,sendername"`
	// Preset sets where the delivery ID is and how the signature is
	// checked. Explicit delivery_id and signature fields override it.
	Preset string `yaml:"preset" validate:"required,preset"`
	// DeliveryID says where the delivery ID is. It defaults to the
	// preset's place, and generic senders must set it.
	DeliveryID DeliveryID `yaml:"delivery_id"`
	// EventType says where the event type is. It defaults to the preset's
	// place. A generic sender without it has empty event types.
	EventType EventType `yaml:"event_type"`
	// Secret and Secrets are the signing secrets. A signature valid under
	// any of them passes, so a secret can be rotated.
	Secret  string   `yaml:"secret"`
	Secrets []string `yaml:"secrets" validate:"dive,required"`
	// Tolerance is how far a signed timestamp may be from now, for the
	// schemes that sign one. It is 300s by default and at most
	// [MaxTolerance].
	Tolerance Duration `yaml:"tolerance" validate:"gte=1000000000,lte=3600000000000"`
	// Signature overrides the preset's signature check. Generic senders
	// use it to turn on hmac-sha256.
	Signature Signature `yaml:"signature"`
	// PublicURL is the URL of this sender's endpoint as the provider
	// requests it. Schemes that sign the URL need it, such as Twilio's,
	// because behind a proxy the gateway's own URL differs. The request's
	// query string is appended to it. When left out, the request's own
	// scheme, Host header, path and query are used.
	PublicURL string `yaml:"public_url" validate:"omitempty,http_url"`
	// VerifyToken answers a Meta subscription check, a GET with
	// hub.mode=subscribe. Its hub.verify_token must equal VerifyToken.
	// Like a secret, it is never shown.
	VerifyToken string `yaml:"verify_token"`
	// Retention is how long the sender's delivery keys are remembered.
	Retention Duration `yaml:"retention" validate:"gte=1000000000"`
	// EventRetention is how long the sender's events are kept. It
	// defaults to Retention.
	EventRetention Duration `yaml:"event_retention" validate:"gte=1000000000"`
	// MaxBodyBytes is the largest request body accepted, 1 MiB by default.
	MaxBodyBytes int64 `yaml:"max_body_bytes" validate:"min=1,max=67108864"`
	// AcceptEncodings lists the Content-Encodings accepted besides
	// identity. Only gzip is possible. A body in any other gets 415.
	AcceptEncodings []string `yaml:"accept_encodings" validate:"unique,dive,oneof=gzip"`
	// StoreHeaders, when set, lists the only request headers stored with
	// an event; Content-Type always is. DropHeaders lists headers not to
	// store, besides the credential-like ones. At most one of the two is
	// set. A preset's signature headers are never stored, and naming one in
	// StoreHeaders is refused.
	StoreHeaders []string `yaml:"store_headers" validate:"excluded_with=DropHeaders,dive,headername"`
	DropHeaders  []string `yaml:"drop_headers" validate:"dive,headername"`
	// Forward lists the services each accepted event is forwarded to.
	Forward []Target `yaml:"forward" validate:"unique=Name,dive"`

	// EventTypeEnvelope is where the event type is when the value at
	// EventType is EventTypeEnvelope.When, as in Slack's event_callback.
	// The preset sets it when event_type is left out.
	EventTypeEnvelope Envelope `yaml:"-"`

	targetNames []string
}

// Target is a service that accepted events are forwarded to, at least
// once, through a transactional outbox. The forward POSTs the stored body
// with the event ID as the idempotency key. The stored body is the body as
// received, decompressed, without a preset's signature object.
type Target struct {
	// Name identifies the target within its sender, with the syntax of a
	// sender's name. The outbox, forward jobs, metric labels and the
	// operator API use it. Unlike the URL, it holds no secret.
	Name string `yaml:"name" validate:"required,sendername"`
	// URL is where the event goes. An http or https URL gets a POST. A
	// nats:// or tls:// URL publishes to NATS JetStream, and may list a
	// cluster's servers, comma-separated. An amqp:// or amqps:// URL
	// publishes to RabbitMQ. A URL never holds a user name or password; a
	// broker's credentials are fields of NATS or RabbitMQ.
	URL string `yaml:"url" validate:"required,target_url"`
	// Timeout bounds one attempt, 10s by default.
	Timeout Duration `yaml:"timeout" validate:"gte=1000000,lte=300000000000"`
	// MaxAttempts is how many attempts are made before the forward fails,
	// 20 by default.
	MaxAttempts int `yaml:"max_attempts" validate:"min=1,max=1000"`
	// SigningSecret, when set, signs forwards with webhook-signature. It
	// is a Standard Webhooks secret: whsec_ and base64.
	SigningSecret string `yaml:"signing_secret"`
	// Headers are extra request headers sent with every forward.
	Headers map[string]string `yaml:"headers" validate:"dive,keys,headername,endkeys"`
	// SecretPath marks the URL's path as a secret, as in Slack's webhook
	// URLs. Wherever the URL is shown, its path segments are redacted too.
	SecretPath bool `yaml:"secret_path"`
	// MaxInFlight is how many forwards to this target one worker process
	// runs at once. The default 0 sets no cap beyond the target's fair
	// share of the workers, which shrinks as more targets are busy.
	MaxInFlight int `yaml:"max_in_flight" validate:"min=0,max=1000"`
	// EventTypes, when set, are the only event types forwarded to the
	// target. Each is an exact type or a prefix ending in "*", such as
	// "invoice.*". "*" alone is every type, as is leaving it out.
	EventTypes []string `yaml:"event_types"`
	// Match lists conditions on the request's headers or JSON body that
	// must all hold for an event to be forwarded to the target.
	Match []Condition `yaml:"match" validate:"dive"`
	// FilterExpr, when set, is a CEL expression of type bool: only the
	// events for which it is true are forwarded to the target. It is
	// decided at ingest, with EventTypes and Match.
	FilterExpr string `yaml:"filter"`
	// TransformExpr, when set, is a CEL expression whose result is the
	// forwarded body: a map or a list sent as JSON, a string or bytes as
	// they are.
	TransformExpr string `yaml:"transform"`
	// TransformHeadersExpr, when set, is a CEL expression giving a map of
	// header names to strings added to each forward.
	TransformHeadersExpr string `yaml:"transform_headers"`
	// RuleCostLimit bounds one evaluation of each of the target's rules,
	// in CEL's cost units: [rules.DefaultCostLimit] by default, at most
	// [rules.MaxCostLimit].
	RuleCostLimit uint64 `yaml:"rule_cost_limit"`
	// BreakerThreshold is the least number of failed attempts within the
	// circuit breaker's 10s window before the failure rate can open the
	// breaker. It defaults to [DefaultBreakerThreshold].
	BreakerThreshold int `yaml:"breaker_threshold" validate:"min=0,max=1000"`
	// Rate, when set, is the most forwards sent to the target per second
	// or per minute, such as "50/s". The forwarding processes of the whole
	// deployment share it.
	Rate Rate `yaml:"rate"`
	// Burst is how many forwards over the rate may go at once after a
	// quiet spell. It needs Rate. It defaults to a tenth of the rate's
	// count, at least 1.
	Burst int `yaml:"burst" validate:"min=0,max=100000"`
	// Ordering, when set, delivers the target's forwards of one key one
	// at a time, in the order hookgate accepted them.
	Ordering *Ordering `yaml:"ordering"`

	// NATS says where a nats:// target publishes. It is required with
	// such a URL, and refused with any other.
	NATS *NATSTarget `yaml:"nats"`
	// RabbitMQ says where an amqp:// target publishes. It is required
	// with such a URL, and refused with any other.
	RabbitMQ *RabbitMQTarget `yaml:"rabbitmq"`

	// SigningKey is SigningSecret decoded, or nil. Parse sets it.
	SigningKey []byte `yaml:"-"`
	// Filter is FilterExpr compiled, or nil. Parse sets it.
	Filter *rules.Filter `yaml:"-"`
	// Transform is TransformExpr and TransformHeadersExpr compiled, or
	// nil. Parse sets it.
	Transform *rules.Transform `yaml:"-"`

	// answerSecrets is [Target.AnswerSecrets], worked out by Parse; nil
	// for a target made otherwise.
	answerSecrets []string
}

// AnswerSecrets returns the target's secrets that its answers may echo,
// for [redact.Text]: those of its URL ([redact.Secrets]), the values of
// its credential-like headers, and its signing secret. Parse works them
// out once, so that an attempt does not parse the URL again; for a
// target that Parse did not make they are worked out at each call. The
// caller must not modify the slice.
func (t *Target) AnswerSecrets() []string {
	if t.answerSecrets != nil {
		return t.answerSecrets
	}
	return t.workOutAnswerSecrets()
}

// workOutAnswerSecrets returns [Target.AnswerSecrets], never nil.
func (t *Target) workOutAnswerSecrets() []string {
	secrets := redact.Secrets(t.URL, t.SecretPath)
	for k, v := range t.Headers {
		if redact.CredentialHeader(k) {
			secrets = append(secrets, v)
		}
	}
	if t.SigningSecret != "" {
		secrets = append(secrets, t.SigningSecret)
	}
	if secrets == nil {
		return []string{}
	}
	return slices.Clip(secrets)
}

// NATSTarget is where a NATS JetStream target publishes. Subject is a
// template over {sender}, {target} and {event_type}, on a stream whose
// subjects take it. An event type's characters that a subject cannot hold
// become _, and so does a missing type. The first token is a literal,
// {sender} or {target}. The credentials are a token, or a user and
// password.
type NATSTarget struct {
	Subject  string `yaml:"subject" validate:"required,max=255"`
	Token    string `yaml:"token"`
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// DiscoveredServers, when true, lets the connection also go to the
	// other cluster members that a NATS server advertises, with the
	// target's credentials. By default it goes only to the servers of the
	// target's URL, so the credentials go nowhere else.
	DiscoveredServers bool `yaml:"discovered_servers"`
}

// RabbitMQTarget is where a RabbitMQ target publishes: to Exchange with
// RoutingKey. The default exchange "" routes by queue name. RoutingKey is
// a template over {sender}, {target} and {event_type}, whose first word is
// not {event_type}. User and Password default to RabbitMQ's guest/guest.
type RabbitMQTarget struct {
	Exchange   string `yaml:"exchange" validate:"max=255"`
	RoutingKey string `yaml:"routing_key" validate:"max=255"`
	User       string `yaml:"user"`
	Password   string `yaml:"password"`
}

// TargetKind is the kind of destination a target is.
type TargetKind string

// The kinds of targets.
const (
	KindHTTP     TargetKind = "http"
	KindNATS     TargetKind = "nats"
	KindRabbitMQ TargetKind = "rabbitmq"
)

// targetSchemes are the URL schemes of each kind of target.
var targetSchemes = map[string]TargetKind{
	"http": KindHTTP, "https": KindHTTP,
	"nats": KindNATS, "tls": KindNATS,
	"amqp": KindRabbitMQ, "amqps": KindRabbitMQ,
}

// Kind returns the kind of destination t is, by its URL's scheme. It is
// HTTP unless the scheme names a broker.
func (t *Target) Kind() TargetKind {
	scheme, _, ok := strings.Cut(t.URL, "://")
	if !ok {
		return KindHTTP
	}
	if k, ok := targetSchemes[strings.ToLower(scheme)]; ok {
		return k
	}
	return KindHTTP
}

// validTargetURL reports whether raw is an absolute URL with a host and a
// target's scheme. A NATS target's may be a list of nats:// or tls:// URLs.
func validTargetURL(raw string) bool {
	t := &Target{URL: raw}
	servers := t.Servers()
	for _, s := range servers {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return false
		}
		if k, ok := targetSchemes[strings.ToLower(u.Scheme)]; !ok || k != t.Kind() {
			return false
		}
	}
	return len(servers) > 0
}

// Defaults of a forward target.
const (
	DefaultForwardTimeout     = 10 * time.Second
	DefaultForwardMaxAttempts = 20
	DefaultBreakerThreshold   = 5
)

// TargetNames returns the names of the sender's forward targets, in
// configuration order, or nil. The slice is shared, so do not modify it.
func (s *Sender) TargetNames() []string { return s.targetNames }

// Target returns the sender's forward target with the given name, or false.
func (s *Sender) Target(name string) (*Target, bool) {
	for i := range s.Forward {
		if s.Forward[i].Name == name {
			return &s.Forward[i], true
		}
	}
	return nil, false
}

// TargetByURL returns the sender's forward target with the given URL, or
// false. Forward jobs that name their target by URL find it so.
func (s *Sender) TargetByURL(url string) (*Target, bool) {
	for i := range s.Forward {
		if s.Forward[i].URL == url {
			return &s.Forward[i], true
		}
	}
	return nil, false
}

// Signature is a sender's signature block.
type Signature struct {
	// Scheme is the signature scheme. It is the name of a preset that
	// checks a signature, hmac-sha256 with Header, Encoding and Prefix, or
	// none. Empty means the preset's.
	Scheme   string `yaml:"scheme" validate:"omitempty,scheme"`
	Header   string `yaml:"header" validate:"omitempty,headername"`
	Encoding string `yaml:"encoding" validate:"omitempty,oneof=hex base64"`
	Prefix   string `yaml:"prefix"`
	// Secret is another way to give the secret; it joins the sender's.
	Secret string `yaml:"secret"`
}

// DeliveryID names where a request carries its delivery ID: a header, or
// an RFC 6901 JSON pointer into a JSON body. BodySHA256 is for requests
// that carry none. Exactly one is set.
type DeliveryID struct {
	Header      string `yaml:"header" validate:"required_without_all=JSONPointer BodySHA256,excluded_with=JSONPointer,omitempty,headername"`
	JSONPointer string `yaml:"json_pointer" validate:"omitempty,jsonpointer"`
	// BodySHA256 serves providers that send no delivery ID, such as Meta.
	// The delivery ID is the hex SHA-256 of the decompressed body, so a
	// retry of the same bytes is a replay. Two different events with
	// identical bytes are then one delivery. A retry whose bytes differ,
	// such as by a new timestamp, is a new one.
	BodySHA256 bool `yaml:"body_sha256" validate:"excluded_with=Header JSONPointer"`
}

// Ordering says where an event's ordering key is: a header, an RFC 6901
// JSON pointer into a JSON body (a string or a number), or a constant for
// one sequence per sender. Exactly one is set. Forwards of one (sender,
// target, key) are attempted one at a time, in the order of their
// acceptance. An event without the key is forwarded unordered.
type Ordering struct {
	Header      string `yaml:"header" validate:"omitempty,headername"`
	JSONPointer string `yaml:"json_pointer" validate:"omitempty,jsonpointer"`
	Constant    string `yaml:"constant" validate:"max=128"`
	// OnFailure is what a forward that fails for good does to its key:
	// "hold" (the default) blocks the key until an operator redelivers or
	// skips the forward; "skip" records it failed and moves on.
	OnFailure string `yaml:"on_failure" validate:"omitempty,oneof=hold skip"`
}

// The values of [Ordering.OnFailure].
const (
	OnFailureHold = "hold"
	OnFailureSkip = "skip"
)

// MaxOrderKey is the longest ordering key kept as it is. A longer one is
// kept as "sha256:" and the hex of its SHA-256.
const MaxOrderKey = 128

// OrderKey returns the ordering key kept for raw, the value read from an
// event: raw itself, or its hash when it is longer than [MaxOrderKey].
func OrderKey(raw string) string {
	if len(raw) <= MaxOrderKey {
		return raw
	}
	sum := sha256.Sum256([]byte(raw))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// KeyOf returns the ordering key of a stored event with headers h and
// body, or "" when it has none: as ingest reads it, for a redelivery.
func (o *Ordering) KeyOf(h http.Header, body []byte) string {
	switch {
	case o == nil:
		return ""
	case o.Constant != "":
		return o.Constant
	case o.Header != "":
		if vs := h.Values(o.Header); len(vs) == 1 {
			return OrderKey(vs[0])
		}
		return ""
	}
	p, err := jsonptr.ParsePointer(o.JSONPointer)
	if err != nil {
		return ""
	}
	v, err := p.String(body)
	if err != nil {
		return ""
	}
	return OrderKey(v)
}

// Skips reports whether a forward that fails for good lets its key move
// on. It is true for a nil Ordering: an unordered target holds nothing.
func (o *Ordering) Skips() bool { return o == nil || o.OnFailure == OnFailureSkip }

// Duration is a time.Duration written as "168h", "30m" or "10s" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: not a duration such as 168h or 30m", n.Line)
	}
	*d = Duration(v)
	return nil
}

// Rate is a delivery rate: Count forwards per Per, a second or a minute,
// written "50/s" or "600/m". The zero Rate is no rate.
type Rate struct {
	Count int
	Per   time.Duration
}

// MaxRateCount bounds a rate's count.
const MaxRateCount = 1_000_000

// UnmarshalYAML parses "<count>/s" or "<count>/m".
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseRate(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*r = v
	return nil
}

// ParseRate parses a rate written "<count>/s" or "<count>/m". The count is
// a whole number from 1 to [MaxRateCount].
func ParseRate(s string) (Rate, error) {
	count, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	per := map[string]time.Duration{"s": time.Second, "m": time.Minute}[unit]
	n, err := strconv.Atoi(count)
	if !ok || per == 0 || err != nil || n < 1 || n > MaxRateCount {
		return Rate{}, fmt.Errorf("not a rate such as 50/s or 600/m (a whole number from 1 to %d, per second or per minute)", MaxRateCount)
	}
	return Rate{Count: n, Per: per}, nil
}

// IsZero reports whether r is no rate.
func (r Rate) IsZero() bool { return r.Count == 0 }

// PerSecond is r in forwards per second.
func (r Rate) PerSecond() float64 {
	if r.Per <= 0 {
		return 0
	}
	return float64(r.Count) / r.Per.Seconds()
}

// String writes r as in the configuration, such as "50/s", or "" for no
// rate.
func (r Rate) String() string {
	switch {
	case r.IsZero():
		return ""
	case r.Per == time.Minute:
		return strconv.Itoa(r.Count) + "/m"
	}
	return strconv.Itoa(r.Count) + "/s"
}

// MarshalYAML writes r as in the configuration.
func (r Rate) MarshalYAML() (any, error) { return r.String(), nil }

// RateBurst returns t's burst. That is Burst, or else a tenth of the
// rate's count, at least 1. It is 0 when t has no rate.
func (t *Target) RateBurst() int {
	switch {
	case t.Rate.IsZero():
		return 0
	case t.Burst > 0:
		return t.Burst
	}
	return max(1, t.Rate.Count/10)
}

// Sender returns the sender named name, or false.
func (c *Config) Sender(name string) (*Sender, bool) {
	for i := range c.Senders {
		if c.Senders[i].Name == name {
			return &c.Senders[i], true
		}
	}
	return nil, false
}

// Source gives the configuration in force. A *Config gives itself. A
// process that reloads its configuration gives the one it loaded last. So
// a component reads the running configuration without holding on to one.
// Read it once per request or forward attempt, and use that throughout. A
// reload swaps it whole, so two reads may return two configurations.
type Source interface {
	Current() *Config
}

// Current returns c, since a fixed configuration is its own [Source].
func (c *Config) Current() *Config { return c }

// Target returns the target named target of the sender named sender. It
// returns false when there is none, or c is nil.
func (c *Config) Target(sender, target string) (*Target, bool) {
	if c == nil {
		return nil, false
	}
	s, ok := c.Sender(sender)
	if !ok {
		return nil, false
	}
	return s.Target(target)
}

// Load reads the file at path and returns its validated configuration.
// See [Parse].
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return ParseFile(path, data)
}

// ParseFile calls [Parse] on data, the contents of the file at path, with
// ${VAR} expanded from the process's environment. Its errors start with
// path, as Load's do.
func ParseFile(path string, data []byte) (*Config, error) {
	c, err := Parse(data, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML, expands ${VAR} in string values with lookup, applies
// the defaults and validates the result. Unknown fields are errors. An
// error names the field at fault, such as "senders[1].name", and the rule
// it broke. It never contains the value of a secret.
func Parse(data []byte, lookup func(string) (string, bool)) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	var expanded []string
	if err := expand(&root, lookup, &expanded); err != nil {
		return nil, err
	}
	var c Config
	text := mustMarshal(&root)
	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("senders: the file is empty; list at least one sender")
		}
		return nil, decodeError(err, text, expanded)
	}
	for i := range c.Senders {
		applyDefaults(&c.Senders[i])
	}
	if err := validate(&c); err != nil {
		return nil, err
	}
	var errs []string
	for i := range c.Senders {
		if err := check(&c.Senders[i]); err != nil {
			msg := fmt.Sprintf("senders[%d].%v", i, err)
			// A rule's compile error quotes its expression, which ${VAR}
			// may have filled in.
			if rce := (*ruleCompileError)(nil); errors.As(err, &rce) {
				for _, v := range expanded {
					if v != "" {
						msg = strings.ReplaceAll(msg, v, "(value from the environment)")
					}
				}
			}
			errs = append(errs, msg)
		}
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	return &c, nil
}

func mustMarshal(n *yaml.Node) []byte {
	if n.Kind == 0 {
		return nil
	}
	out, err := yaml.Marshal(n)
	if err != nil {
		// A node tree that yaml.Unmarshal produced always marshals.
		panic(err)
	}
	return out
}

var (
	varRef      = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	wholeNumber = regexp.MustCompile(`^[0-9]{1,18}$`)
	lineRef     = regexp.MustCompile(`line ([0-9]+)`)
	quotedValue = regexp.MustCompile("!!str `[^`]*`|`[^`]*`")
)

// decodeError rewrites a YAML decoding error so that it names the field at
// fault, such as "senders[1].retention". It drops any value that came from
// the environment, which may be a secret. text is the document decoded.
func decodeError(err error, text []byte, expanded []string) error {
	var root yaml.Node
	paths := map[string]string{}
	if yaml.Unmarshal(text, &root) == nil {
		fieldPaths(&root, "", paths)
	}
	// yaml.v3 quotes the offending value, or a prefix, in backquotes.
	msg := quotedValue.ReplaceAllString(err.Error(), "a value")
	for _, v := range expanded {
		msg = strings.ReplaceAll(msg, v, "(value from the environment)")
	}
	msg = lineRef.ReplaceAllStringFunc(msg, func(m string) string {
		if p, ok := paths[lineRef.FindStringSubmatch(m)[1]]; ok {
			return p + " (" + m + ")"
		}
		return m
	})
	return errors.New("parse YAML: " + strings.TrimPrefix(msg, "yaml: "))
}

// fieldPaths records the path of each line's mapping value, such as
// "senders[1].retention".
func fieldPaths(n *yaml.Node, path string, out map[string]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			fieldPaths(c, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			out[strconv.Itoa(n.Content[i+1].Line)] = p
			fieldPaths(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if _, ok := out[strconv.Itoa(c.Line)]; !ok {
				out[strconv.Itoa(c.Line)] = p
			}
			fieldPaths(c, p, out)
		}
	}
}

// expand replaces ${VAR} in every scalar with the variable's value, and
// appends the values it put in to expanded. An unset variable is an error
// naming it and its line; the error names every unset variable of the
// document, so that one run says all that is missing.
func expand(root *yaml.Node, lookup func(string) (string, bool), expanded *[]string) error {
	var missing []string
	expandNode(root, lookup, expanded, &missing)
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("environment variable %s is not set", missing[0])
	}
	return fmt.Errorf("environment variables %s are not set", strings.Join(missing, ", "))
}

// expandNode expands the scalars under n, and appends each unset
// variable, as "NAME (line N)", to missing.
func expandNode(n *yaml.Node, lookup func(string) (string, bool), expanded, missing *[]string) {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		n.Value = varRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			v, ok := lookup(name)
			if !ok {
				*missing = append(*missing, fmt.Sprintf("%s (line %d)", name, n.Line))
			}
			if v != "" {
				*expanded = append(*expanded, v)
			}
			return v
		})
		// A value from the environment is taken literally. It is a string,
		// or a whole number where the field is a number.
		n.Tag = "!!str"
		n.Style = yaml.DoubleQuotedStyle
		if wholeNumber.MatchString(n.Value) {
			n.Tag = "!!int"
			n.Style = 0
		}
	}
	for _, c := range n.Content {
		expandNode(c, lookup, expanded, missing)
	}
}

func applyDefaults(s *Sender) {
	p, known := PresetNamed(s.Preset)
	if known && s.DeliveryID == (DeliveryID{}) {
		s.DeliveryID = p.DeliveryID
	}
	if known && s.EventType == (EventType{}) {
		s.EventType, s.EventTypeEnvelope = p.EventType, p.EventTypeEnvelope
	}
	if s.Tolerance == 0 {
		s.Tolerance = Duration(p.Signature.Tolerance)
		if s.Tolerance == 0 {
			s.Tolerance = Duration(signature.DefaultTolerance)
		}
	}
	if s.Retention == 0 {
		s.Retention = Duration(DefaultRetention)
	}
	if s.EventRetention == 0 {
		s.EventRetention = s.Retention
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
	}
	for i := range s.Forward {
		t := &s.Forward[i]
		if t.Timeout == 0 {
			t.Timeout = Duration(DefaultForwardTimeout)
		}
		if t.BreakerThreshold == 0 {
			t.BreakerThreshold = DefaultBreakerThreshold
		}
		if t.RuleCostLimit == 0 {
			t.RuleCostLimit = rules.DefaultCostLimit
		}
		if t.MaxAttempts == 0 {
			t.MaxAttempts = DefaultForwardMaxAttempts
		}
	}
}

var (
	senderName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	// headerName is an RFC 9110 field name, a token.
	headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

var validate = newValidator()

func newValidator() func(*Config) error {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	for tag, fn := range map[string]func(string) bool{
		"sendername":  senderName.MatchString,
		"headername":  headerName.MatchString,
		"jsonpointer": func(s string) bool { _, err := jsonptr.ParsePointer(s); return err == nil },
		"preset":      func(s string) bool { _, ok := PresetNamed(s); return ok },
		"scheme":      func(s string) bool { return slices.Contains(SchemeNames(), s) },
		"target_url":  validTargetURL,
	} {
		if err := v.RegisterValidation(tag, func(fl validator.FieldLevel) bool { return fn(fl.Field().String()) }); err != nil {
			panic(err)
		}
	}
	return func(c *Config) error {
		err := v.Struct(c)
		var verrs validator.ValidationErrors
		if !errors.As(err, &verrs) {
			return err
		}
		msgs := make([]string, 0, len(verrs))
		for _, fe := range verrs {
			msgs = append(msgs, describe(fe))
		}
		return errors.New(strings.Join(msgs, "; "))
	}
}

// durationParam writes a validator parameter in nanoseconds as a duration
// without zero units, such as "5m".
func durationParam(p string) string {
	n, err := strconv.ParseInt(p, 10, 64)
	if err != nil {
		return p
	}
	s := time.Duration(n).String()
	s = strings.TrimSuffix(s, "0s")
	return strings.TrimSuffix(s, "0m")
}

// describe turns a validation failure into "field: reason", without the
// field's value, which may be a secret.
func describe(fe validator.FieldError) string {
	field := strings.TrimPrefix(fe.Namespace(), "Config.")
	parent := field
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		parent = field[:i]
		if j := strings.LastIndexByte(parent, '.'); j >= 0 {
			parent = parent[j+1:]
		}
	}
	var reason string
	switch fe.Tag() {
	case "required":
		reason = "is required"
	case "required_without":
		reason = "is required: set " + parent + ".header or " + parent + ".json_pointer"
	case "required_without_all":
		reason = "is required: set " + parent + ".header, " + parent + ".json_pointer or " + parent + ".body_sha256: true"
	case "excluded_with":
		reason = "cannot be set together with " + parent + ".json_pointer"
		if fe.Field() == "body_sha256" {
			reason = "cannot be set together with " + parent + ".header or " + parent + ".json_pointer"
		}
		if fe.Field() == "store_headers" {
			reason = "cannot be set together with drop_headers: list the headers to keep or those to drop"
		}
	case "min":
		if fe.Kind() == reflect.Slice {
			reason = "must list at least " + fe.Param()
		} else {
			reason = "must be at least " + fe.Param()
		}
	case "max":
		reason = "must be at most " + fe.Param()
	case "gte":
		if fe.Param() == "1000000" {
			reason = "must be at least 1ms"
		} else {
			reason = "must be at least 1s"
		}
	case "lte":
		reason = "must be at most " + durationParam(fe.Param())
		if fe.Field() == "tolerance" {
			reason += ": a signed request that someone captured passes the signature check for as long as its timestamp is within the tolerance"
		}
	case "http_url":
		reason = "must be an http or https URL"
	case "target_url":
		reason = "must be an http or https URL, or a broker's: nats:// or tls:// (NATS JetStream), amqp:// or amqps:// (RabbitMQ)"
	case "oneof":
		reason = fmt.Sprintf("must be one of: %s", fe.Param())
	case "preset":
		reason = "must be one of: " + strings.Join(PresetNames(), " ")
	case "scheme":
		reason = "must be one of: " + strings.Join(SchemeNames(), " ")
	case "unique":
		reason = "names must be unique, and each needs one (lower-case letters, digits, _ and -)"
	case "sendername":
		reason = "must match ^[a-z0-9][a-z0-9_-]{0,62}$ (lower-case letters, digits, _ and -)"
	case "jsonpointer":
		reason = "must be a JSON pointer (RFC 6901) such as /id or /data/object/id"
	case "headername":
		reason = "must be an HTTP header name such as X-Delivery-Id"
	default:
		reason = "fails the rule " + fe.Tag()
	}
	return field + ": " + reason
}
