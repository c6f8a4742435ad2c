package sender_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookgate/hookgate/internal/sender"
)

// TestLoadSnapshot: a snapshot holds the compiled senders of the file, the
// hex SHA-256 of its bytes as read (what sha256sum prints) and its load
// time; an invalid file is refused with Load's error, naming the file and
// the field.
func TestLoadSnapshot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "hookgate.yaml")
	data := []byte("senders:\n" + senderYAML("acme", "delivery_id: { header: X-Id }"))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	snap, err := sender.LoadSnapshot(path, at)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if snap.Hash != hex.EncodeToString(sum[:]) || !snap.LoadedAt.Equal(at) {
		t.Errorf("hash %s, loaded at %s; want %x and %s", snap.Hash, snap.LoadedAt, sum, at)
	}
	if _, ok := snap.Get("acme"); !ok || len(snap.Config().Senders) != 1 {
		t.Errorf("snapshot lacks sender acme: %+v", snap.Config().Senders)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("senders:\n  - name: Acme!\n    preset: generic\n    delivery_id: { header: X-Id }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = sender.LoadSnapshot(bad, at)
	_, loadErr := sender.Load(bad)
	if err == nil || loadErr == nil || err.Error() != loadErr.Error() {
		t.Fatalf("LoadSnapshot: %v; Load: %v; want the same error", err, loadErr)
	}
	if !strings.HasPrefix(err.Error(), bad+": ") || !strings.Contains(err.Error(), "senders[0].name") {
		t.Errorf("error %q does not name the file and the field", err)
	}
}

// TestLive: a Live gives the snapshot last swapped in, whole, to readers
// that run while it is swapped; a Set is a Source of itself.
func TestLive(t *testing.T) {
	t.Parallel()
	a := mustParse(t, "senders:\n"+senderYAML("a", "delivery_id: { header: X-Id }"), noEnv)
	b := mustParse(t, "senders:\n"+senderYAML("b", "delivery_id: { header: X-Id }"), noEnv)
	if a.Snapshot().Set != a || a.Snapshot().Config().Current() != a.Config() {
		t.Fatal("a Set's snapshot is not the set itself")
	}
	live := sender.NewLive(a.Snapshot())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				snap := live.Snapshot()
				name := snap.Config().Senders[0].Name
				if _, ok := snap.Get(name); !ok || (snap.Set != a && snap.Set != b) {
					t.Error("a snapshot mixes two configurations")
					return
				}
			}
		})
	}
	for i := range 1000 {
		next := b
		if i%2 == 1 {
			next = a
		}
		live.Swap(next.Snapshot())
	}
	wg.Wait()
	if live.Snapshot().Set != a || live.Current() != a.Config() {
		t.Error("Live does not give the snapshot swapped in last")
	}
}
