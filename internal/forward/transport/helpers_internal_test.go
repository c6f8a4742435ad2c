package transport

import (
	"testing"

	"github.com/hookgate/hookgate/internal/config"
)

// parseConfig parses a hookgate.yaml of the internal tests, with no
// environment, and fails the test when it does not parse.
func parseConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// mustTarget returns the target name of sender acme in cfg.
func mustTarget(t *testing.T, cfg *config.Config, name string) *config.Target {
	t.Helper()
	s, ok := cfg.Sender("acme")
	if !ok {
		t.Fatal("no sender acme")
	}
	tg, ok := s.Target(name)
	if !ok {
		t.Fatalf("no target %s", name)
	}
	return tg
}
