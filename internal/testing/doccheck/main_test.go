package doccheck

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestMain checks that no goroutine outlives the tests, and lets pgtest
// leave this process's spare databases to the test processes after it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.M(m))
}
