package deploytest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.M(m))
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeFile writes content to path, readable by everyone: the image's
// user (65532) reads what the test mounts into its container.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
