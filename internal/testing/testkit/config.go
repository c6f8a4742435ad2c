package testkit

import (
	"testing"

	"github.com/hookgate/hookgate/internal/config"
)

// ParseConfig parses a hookgate.yaml without environment variables. It
// fails the test when the file does not parse.
func ParseConfig(t testing.TB, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ConfigTarget returns the target name of sender in cfg. It fails the test
// when either is missing.
func ConfigTarget(t testing.TB, cfg *config.Config, sender, name string) *config.Target {
	t.Helper()
	s, ok := cfg.Sender(sender)
	if !ok {
		t.Fatalf("no sender %s", sender)
	}
	tg, ok := s.Target(name)
	if !ok {
		t.Fatalf("no target %s", name)
	}
	return tg
}
