package forward

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
