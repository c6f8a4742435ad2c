package config_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/hookgate/hookgate/internal/config"
)

// Every secret written in hookgate.example.yaml is one ExampleSecrets knows,
// so that a configuration copied from the example is caught.
func TestExampleSecretsListed(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../hookgate.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	// Each scalar under a key naming a secret, and each of its items.
	var secrets []string
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		for i := 0; i+1 < len(n.Content) && n.Kind == yaml.MappingNode; i += 2 {
			if k, v := n.Content[i].Value, n.Content[i+1]; strings.Contains(k, "secret") {
				if v.Kind == yaml.ScalarNode {
					secrets = append(secrets, v.Value)
				}
				for _, item := range v.Content {
					secrets = append(secrets, item.Value)
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&root)
	if len(secrets) == 0 {
		t.Fatal("found no secret in hookgate.example.yaml; the test no longer reads it right")
	}
	lines := make([]string, 0, len(secrets))
	for _, s := range secrets {
		lines = append(lines, "  - name: s"+string(rune('a'+len(lines)))+"\n    preset: github\n    secret: "+s+"\n")
	}
	c, err := config.Parse([]byte("senders:\n"+strings.Join(lines, "")), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ExampleSecrets(); len(got) != len(secrets) {
		t.Errorf("ExampleSecrets finds %q of the example's %d secrets", got, len(secrets))
	}
	// The example itself, loaded as make run does, is caught.
	ex, err := config.Load("../../hookgate.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := ex.ExampleSecrets(); !slices.Contains(got, "senders[2].secret (github)") {
		t.Errorf("the example's own ExampleSecrets = %q", got)
	}
	// A secret of one's own, or the example's from the environment.
	own := "senders:\n  - name: gh\n    preset: github\n    secret: ${S}\n"
	for v, want := range map[string]int{"my-own-secret-5f2a9c": 0, secrets[0]: 1} {
		c, err := config.Parse([]byte(own), func(string) (string, bool) { return v, true })
		if err != nil {
			t.Fatal(err)
		}
		if got := c.ExampleSecrets(); len(got) != want {
			t.Errorf("secret from the environment: ExampleSecrets = %q, want %d", got, want)
		}
	}
}
