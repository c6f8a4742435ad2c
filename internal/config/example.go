package config

import "fmt"

// exampleSecrets are the secrets that hookgate.example.yaml ships with.
// Anyone who has read the repository knows them. A test keeps this list and
// the file in agreement.
var exampleSecrets = map[string]bool{
	"dev-github-secret":       true,
	"whsec_dev_stripe_secret": true,
	"whsec_aG9va2dhdGUgZXhhbXBsZSBzaW5rIGtleSwgcHVibGljIQ==": true,
}

// ExampleSecretsEnv is the environment variable that lets hookgate start
// with the example's secrets. make run sets it.
const ExampleSecretsEnv = "HOOKGATE_ALLOW_EXAMPLE_SECRETS"

// ExampleSecrets returns the fields of c whose value, after ${VAR}
// expansion, is one of the example's secrets. A field reads like
// "senders[2].secret (github)". It never returns a secret's value.
func (c *Config) ExampleSecrets() []string {
	var out []string
	for i := range c.Senders {
		s := &c.Senders[i]
		at := func(field, v string) {
			if exampleSecrets[v] {
				out = append(out, fmt.Sprintf("senders[%d].%s (%s)", i, field, s.Name))
			}
		}
		at("secret", s.Secret)
		for j, v := range s.Secrets {
			at(fmt.Sprintf("secrets[%d]", j), v)
		}
		at("signature.secret", s.Signature.Secret)
		for j := range s.Forward {
			at(fmt.Sprintf("forward[%d].signing_secret", j), s.Forward[j].SigningSecret)
		}
	}
	return out
}
