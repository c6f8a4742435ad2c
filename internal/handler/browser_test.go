package handler_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// The API explorer renders in a real browser under its Content-Security-
// Policy: the operations of the spec appear in the page's DOM, which needs
// its scripts to run and the spec to be fetched. Skipped where Debian's
// chromium is not installed.
func TestDocsRenderInBrowser(t *testing.T) {
	testkit.Slow(t, "drives a real browser")
	t.Parallel()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed")
	}
	s, _ := newDBServer(t, options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=15000", "--dump-dom", s.url+"/docs").Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	for _, want := range []string{`class="swagger-ui`, "/webhooks/{sender}", "opblock"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered explorer has no %q; DOM (%d bytes): %.2000s", want, len(dom), dom)
		}
	}
}
