// Package config loads and validates hookgate.yaml: the senders hookgate
// accepts webhooks from, where each one puts its delivery ID, and how long
// delivery keys are remembered.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
	"go.yaml.in/yaml/v3"
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
	// Preset sets where the delivery ID is (and, in later versions, how the
	// signature is checked); explicit fields override it.
	Preset string `yaml:"preset" validate:"required,oneof=generic"`
	// DeliveryID says where the delivery ID is; required for generic.
	DeliveryID DeliveryID `yaml:"delivery_id"`
	// Retention is how long the sender's delivery keys are remembered.
	Retention Duration `yaml:"retention" validate:"gte=1000000000"`
	// MaxBodyBytes is the largest request body accepted (1 MiB by default).
	MaxBodyBytes int64 `yaml:"max_body_bytes" validate:"min=1,max=67108864"`
}

// DeliveryID names where a request carries its delivery ID: a header, or a
// JSON pointer (RFC 6901) into a JSON body. Exactly one is set.
type DeliveryID struct {
	Header      string `yaml:"header" validate:"required_without=JSONPointer,excluded_with=JSONPointer,omitempty,headername"`
	JSONPointer string `yaml:"json_pointer" validate:"omitempty,jsonpointer"`
}

// Duration is a time.Duration written as "168h", "30m" or "10s" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration such as 168h or 30m", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
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

// Load reads the file at path and returns its validated configuration; see
// Parse.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
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
	if err := expand(&root, lookup); err != nil {
		return nil, err
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(mustMarshal(&root)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("senders: the file is empty; list at least one sender")
		}
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	for i := range c.Senders {
		applyDefaults(&c.Senders[i])
	}
	if err := validate(&c); err != nil {
		return nil, err
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

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand replaces ${VAR} in every scalar with the variable's value. An unset
// variable is an error naming it and the line.
func expand(n *yaml.Node, lookup func(string) (string, bool)) error {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		var missing []string
		n.Value = varRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			v, ok := lookup(name)
			if !ok {
				missing = append(missing, name)
			}
			return v
		})
		if len(missing) > 0 {
			return fmt.Errorf("line %d: environment variable %s is not set", n.Line, strings.Join(missing, ", "))
		}
		// A value that came from the environment is a string, whatever it looks like.
		n.Tag = "!!str"
		n.Style = yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		if err := expand(c, lookup); err != nil {
			return err
		}
	}
	return nil
}

func applyDefaults(s *Sender) {
	if s.Retention == 0 {
		s.Retention = Duration(DefaultRetention)
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
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
		"jsonpointer": func(s string) bool { _, err := ParsePointer(s); return err == nil },
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

// describe turns a validation failure into "field: reason", without the
// field's value (it may be a secret).
func describe(fe validator.FieldError) string {
	field := strings.TrimPrefix(fe.Namespace(), "Config.")
	var reason string
	switch fe.Tag() {
	case "required":
		reason = "is required"
	case "required_without":
		reason = "is required: set delivery_id.header or delivery_id.json_pointer"
	case "excluded_with":
		reason = "cannot be set together with delivery_id.json_pointer"
	case "min":
		if fe.Kind() == reflect.Slice {
			reason = "must list at least " + fe.Param()
		} else {
			reason = "must be at least " + fe.Param()
		}
	case "max":
		reason = "must be at most " + fe.Param()
	case "gte":
		reason = "must be at least 1s"
	case "oneof":
		reason = fmt.Sprintf("must be one of: %s", fe.Param())
	case "unique":
		reason = "names must be unique"
	case "sendername":
		reason = "must match ^[a-z0-9][a-z0-9_-]{0,62}$ (lower-case letters, digits, _ and -; it is the {sender} in the URL)"
	case "jsonpointer":
		reason = "must be a JSON pointer (RFC 6901) such as /id or /data/object/id"
	case "headername":
		reason = "must be an HTTP header name such as X-Delivery-Id"
	default:
		reason = "fails the rule " + fe.Tag()
	}
	return field + ": " + reason
}
