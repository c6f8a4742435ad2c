// Package config loads and validates hookgate.yaml: the senders hookgate
// accepts webhooks from, where each one puts its delivery ID, and how long
// delivery keys are remembered.
//
// It is plain data: structs decoded from YAML, with ${VAR} expanded, the
// presets' values applied (Presets, a table of values) and every field
// validated. What ingest runs per request (signature verifiers, the JSON
// scan of a body, routes, the header filter) is compiled from it by
// package sender.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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
	// checked; explicit delivery_id and signature fields override it.
	Preset string `yaml:"preset" validate:"required,preset"`
	// DeliveryID says where the delivery ID is; the preset's place when
	// left out (required for generic).
	DeliveryID DeliveryID `yaml:"delivery_id"`
	// EventType says where the event type is; the preset's place when left
	// out (none for generic: every event type is then empty).
	EventType EventType `yaml:"event_type"`
	// Secret and Secrets are the signing secrets; a signature valid under
	// any of them passes (rotation).
	Secret  string   `yaml:"secret"`
	Secrets []string `yaml:"secrets" validate:"dive,required"`
	// Tolerance is how far a signed timestamp may be from now (300s by
	// default), for the schemes that sign one; at most MaxTolerance.
	Tolerance Duration `yaml:"tolerance" validate:"gte=1000000000,lte=3600000000000"`
	// Signature overrides the preset's signature check; generic senders
	// use it to turn on hmac-sha256.
	Signature Signature `yaml:"signature"`
	// PublicURL is the URL of this sender's endpoint as the provider
	// requests it (https://hooks.example.com/webhooks/twilio), for the
	// schemes that sign the URL (Twilio, Square, HubSpot): behind a proxy
	// the gateway's own scheme, host and path differ from it. The request's
	// query string is appended to it. Left out: the request's own URL
	// (http or https as the connection is, its Host header, its path and
	// query as sent).
	PublicURL string `yaml:"public_url" validate:"omitempty,http_url"`
	// VerifyToken answers a Meta subscription check (GET
	// /webhooks/{sender}?hub.mode=subscribe&hub.verify_token=...): the
	// token must equal it. Like a secret, it is never shown.
	VerifyToken string `yaml:"verify_token"`
	// Retention is how long the sender's delivery keys are remembered.
	Retention Duration `yaml:"retention" validate:"gte=1000000000"`
	// EventRetention is how long the sender's events are kept (by default
	// as long as Retention).
	EventRetention Duration `yaml:"event_retention" validate:"gte=1000000000"`
	// MaxBodyBytes is the largest request body accepted (1 MiB by default).
	MaxBodyBytes int64 `yaml:"max_body_bytes" validate:"min=1,max=67108864"`
	// AcceptEncodings lists the Content-Encodings accepted besides identity
	// (only gzip); a body in any other is refused with 415.
	AcceptEncodings []string `yaml:"accept_encodings" validate:"unique,dive,oneof=gzip"`
	// StoreHeaders, when set, lists the only request headers stored with an
	// event (Content-Type always is); DropHeaders lists headers not stored
	// besides the credential-like ones (events.HeaderFilter). At most one of
	// the two is set. A preset's signature headers are never stored, and
	// naming one in StoreHeaders is refused.
	StoreHeaders []string `yaml:"store_headers" validate:"excluded_with=DropHeaders,dive,headername"`
	DropHeaders  []string `yaml:"drop_headers" validate:"dive,headername"`
	// Forward lists the services each accepted event is forwarded to.
	Forward []Target `yaml:"forward" validate:"unique=Name,dive"`

	// EventTypeEnvelope is where the event type is when the value at
	// EventType is EventTypeEnvelope.When (Slack's event_callback); set
	// from the preset when event_type is left out.
	EventTypeEnvelope Envelope `yaml:"-"`

	targetNames []string
}

// Target is a service an accepted event is forwarded to, by a POST of the
// stored body: the body as received, decompressed, without a preset's
// signature object (Mailgun's) (design: transactional outbox, at least once,
// with the event ID as idempotency key).
type Target struct {
	// Name identifies the target within its sender (unique there, same
	// syntax as a sender's name): in the outbox, in forward jobs, in metric
	// labels and in the operator API. Unlike the URL it holds no secret.
	Name string `yaml:"name" validate:"required,sendername"`
	// URL is where the event goes: POSTed to an http or https URL, or
	// published to a message broker: NATS JetStream at a nats:// (or
	// tls://) URL, with NATS; RabbitMQ at an amqp:// (or amqps://) URL,
	// with RabbitMQ; a NATS target's may list the servers of a cluster,
	// comma-separated (NATSServers). Never with a user name or password in
	// it (in any server of a list): a broker's credentials are fields of
	// NATS or RabbitMQ.
	URL string `yaml:"url" validate:"required,target_url"`
	// Timeout bounds one attempt (10s by default).
	Timeout Duration `yaml:"timeout" validate:"gte=1000000,lte=300000000000"`
	// MaxAttempts is how many attempts are made before the forward fails
	// (20 by default).
	MaxAttempts int `yaml:"max_attempts" validate:"min=1,max=1000"`
	// SigningSecret, a Standard Webhooks secret (whsec_ + base64), signs
	// forwards with webhook-signature when set.
	SigningSecret string `yaml:"signing_secret"`
	// Headers are extra request headers sent with every forward.
	Headers map[string]string `yaml:"headers" validate:"dive,keys,headername,endkeys"`
	// SecretPath marks the URL's path as a secret (as in Slack's
	// /services/T…/B…/<secret>): wherever the URL is shown, its path
	// segments are redacted too (package redact).
	SecretPath bool `yaml:"secret_path"`
	// MaxInFlight is how many forwards to this target one worker process
	// runs at once (0, the default: no cap beyond the target's fair share of
	// the process's forward workers, which shrinks as more targets are busy).
	MaxInFlight int `yaml:"max_in_flight" validate:"min=0,max=1000"`
	// EventTypes, when set, are the only event types forwarded to the
	// target: each an exact type or a prefix ending in "*" ("invoice.*";
	// "*" alone is every type). Left out: every event.
	EventTypes []string `yaml:"event_types"`
	// Match lists conditions on the request's headers or JSON body that
	// must all hold for an event to be forwarded to the target.
	Match []Condition `yaml:"match" validate:"dive"`
	// BreakerThreshold is the least number of failed attempts within the
	// circuit breaker's window (10s) before the target's failure rate can
	// open its breaker (DefaultBreakerThreshold when left out).
	BreakerThreshold int `yaml:"breaker_threshold" validate:"min=0,max=1000"`
	// Rate, when set, is the most forwards sent to the target per second
	// or per minute by the whole deployment ("50/s", "600/m"): the
	// processes that forward share it. Zero: no rate.
	Rate Rate `yaml:"rate"`
	// Burst is how many forwards over the rate may go at once after a
	// quiet spell: only with Rate; left out, a tenth of the rate's count
	// (at least 1).
	Burst int `yaml:"burst" validate:"min=0,max=100000"`

	// NATS publishes the events of a nats:// target to JetStream: only
	// with such a URL, and required with it.
	NATS *NATSTarget `yaml:"nats"`
	// RabbitMQ publishes the events of an amqp:// target to an exchange:
	// only with such a URL, and required with it.
	RabbitMQ *RabbitMQTarget `yaml:"rabbitmq"`

	// SigningKey is SigningSecret decoded; nil when unsigned. Set by Parse.
	SigningKey []byte `yaml:"-"`
}

// NATSTarget is where a NATS JetStream target publishes: Subject, a
// template over {sender}, {target} and {event_type} (an event type's
// characters that a subject cannot hold become _, and so does a missing
// one), on a stream whose subjects take it; its first token is a literal,
// {sender} or {target} (checkFirstToken). The credentials, when the
// server asks for them, are a token or a user and password.
type NATSTarget struct {
	Subject  string `yaml:"subject" validate:"required,max=255"`
	Token    string `yaml:"token"`
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// DiscoveredServers, when true, lets the connection also go to the
	// servers a NATS server advertises (the other members of its cluster,
	// as its INFO lists them), with the target's credentials. False, the
	// default: only to the servers of the target's url (which may list a
	// cluster's), so that the credentials go nowhere else.
	DiscoveredServers bool `yaml:"discovered_servers"`
}

// RabbitMQTarget is where a RabbitMQ target publishes: to Exchange ("",
// the default exchange, routes by queue name) with RoutingKey, a template
// over {sender}, {target} and {event_type} whose first word is not
// {event_type} (checkFirstToken). User and Password are the
// credentials (RabbitMQ's default guest/guest when both are left out).
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

// Kind returns the kind of destination t is, by its URL's scheme: HTTP
// unless it names a broker.
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

// validTargetURL reports whether raw is an absolute URL with a host and
// one of the schemes of targets; a NATS target's, a list of such URLs
// (NATSServers), each nats:// or tls://.
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
// configuration order: nil when it has none. The slice is shared: do not
// modify it.
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
// false: forward jobs of versions that named targets by URL find theirs.
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
	// Scheme is the signature scheme: the name of a preset that checks a
	// signature (its check), hmac-sha256 (with Header, Encoding and
	// Prefix), or none. Empty means the preset's.
	Scheme   string `yaml:"scheme" validate:"omitempty,scheme"`
	Header   string `yaml:"header" validate:"omitempty,headername"`
	Encoding string `yaml:"encoding" validate:"omitempty,oneof=hex base64"`
	Prefix   string `yaml:"prefix"`
	// Secret is another way to give the secret; it joins the sender's.
	Secret string `yaml:"secret"`
}

// DeliveryID names where a request carries its delivery ID: a header, a
// JSON pointer (RFC 6901) into a JSON body, or (BodySHA256) none at all.
// Exactly one is set.
type DeliveryID struct {
	Header      string `yaml:"header" validate:"required_without_all=JSONPointer BodySHA256,excluded_with=JSONPointer,omitempty,headername"`
	JSONPointer string `yaml:"json_pointer" validate:"omitempty,jsonpointer"`
	// BodySHA256, for providers that send no delivery ID (Meta, Lemon
	// Squeezy, Calendly): the delivery ID is the hex SHA-256 of the
	// (decompressed) body, so a retry of the same bytes is a replay. Its
	// limit: two genuinely different events sent with identical bytes are
	// one delivery, and a retry whose bytes differ (a new timestamp inside
	// the body) is a new one.
	BodySHA256 bool `yaml:"body_sha256" validate:"excluded_with=Header JSONPointer"`
}

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

// ParseRate parses a rate written "<count>/s" or "<count>/m", the count a
// whole number from 1 to MaxRateCount.
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

// String writes r as in the configuration ("50/s"), "" for no rate.
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

// RateBurst returns t's burst: Burst, or a tenth of its rate's count (at
// least 1) when left out; 0 when t has no rate.
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

// Source gives the configuration in force. A *Config gives itself; a
// process that reloads its configuration gives the one it loaded last
// (sender.Live), so that a component reads the running configuration
// without holding on to one. Read it once per request or per forward
// attempt, and use what it returned throughout: a reload swaps it whole,
// and two reads may return two configurations.
type Source interface {
	Current() *Config
}

// Current returns c: a fixed configuration is its own Source.
func (c *Config) Current() *Config { return c }

// Target returns the target named target of the sender named sender, or
// false; false for a nil c.
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

// Load reads the file at path and returns its validated configuration; see
// Parse.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return ParseFile(path, data)
}

// ParseFile is Parse of data, the contents of the file at path, with
// ${VAR} expanded from the process's environment: its errors start with
// path, as Load's do.
func ParseFile(path string, data []byte) (*Config, error) {
	c, err := Parse(data, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML, expands ${VAR} in string values with lookup, applies
// the defaults and validates the result. Unknown fields are errors. The
// returned error names the offending field (e.g. "senders[1].name") and the
// rule it broke; it never contains the value of a secret.
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
			errs = append(errs, fmt.Sprintf("senders[%d].%v", i, err))
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
// fault (e.g. "senders[1].retention") and contains no value that came from
// the environment, which may be a secret. text is the document decoded.
func decodeError(err error, text []byte, expanded []string) error {
	var root yaml.Node
	paths := map[string]string{}
	if yaml.Unmarshal(text, &root) == nil {
		fieldPaths(&root, "", paths)
	}
	// yaml.v3 quotes (a prefix of) the offending value in backquotes.
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

// fieldPaths records, for each line that holds a mapping value, the path of
// that value ("senders[1].retention").
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
// naming it and the line.
func expand(n *yaml.Node, lookup func(string) (string, bool), expanded *[]string) error {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		var missing []string
		n.Value = varRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			v, ok := lookup(name)
			if !ok {
				missing = append(missing, name)
			}
			if v != "" {
				*expanded = append(*expanded, v)
			}
			return v
		})
		if len(missing) > 0 {
			return fmt.Errorf("line %d: environment variable %s is not set", n.Line, strings.Join(missing, ", "))
		}
		// A value from the environment is taken literally: a string, or a
		// whole number where the field is a number (max_body_bytes: ${MAX}).
		n.Tag = "!!str"
		n.Style = yaml.DoubleQuotedStyle
		if wholeNumber.MatchString(n.Value) {
			n.Tag = "!!int"
			n.Style = 0
		}
	}
	for _, c := range n.Content {
		if err := expand(c, lookup, expanded); err != nil {
			return err
		}
	}
	return nil
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
		if t.MaxAttempts == 0 {
			t.MaxAttempts = DefaultForwardMaxAttempts
		}
	}
}

var (
	senderName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	// headerName is an RFC 9110 field name (a token).
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
// without zero units ("5m", "1h").
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
// field's value (it may be a secret).
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
