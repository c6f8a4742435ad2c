package console

import (
	"strings"
	"testing"
	"time"
)

// TestConfigValidate: DefaultConfig is valid; a session TTL that is zero or
// negative is refused by validate and New with an error naming the field
// (never taken for the default).
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, ttl := range []time.Duration{0, -time.Minute} {
		c := DefaultConfig()
		c.SessionTTL = ttl
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "SessionTTL "+ttl.String()) {
			t.Errorf("SessionTTL %s: validate() = %v, want an error naming SessionTTL", ttl, err)
		}
		if _, err := New(nil, nil, nil, c); err == nil {
			t.Errorf("SessionTTL %s: New accepted it", ttl)
		}
	}
}
