package sender

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/hookgate/hookgate/internal/config"
)

// Snapshot is one loaded configuration: the compiled senders (the
// embedded Set, and its config.Config), the SHA-256 of the file they were
// read from, and when it was loaded. It is immutable.
type Snapshot struct {
	*Set
	// Hash is the hex SHA-256 of the file's bytes as read (before ${VAR}
	// is expanded: sha256sum of the file gives it); "" for a Set that was
	// not read from a file.
	Hash string
	// LoadedAt is when the file was read; zero for a Set not read from a
	// file.
	LoadedAt time.Time
}

// Source gives the compiled senders in force: a *Set gives itself, a Live
// the snapshot it holds now. Take one Snapshot per request and use it
// throughout, so that the request sees one configuration.
type Source interface {
	Snapshot() *Snapshot
}

// Snapshot returns the set as a snapshot of no file: its own Source.
func (set *Set) Snapshot() *Snapshot { return set.snap }

// LoadSnapshot reads the configuration file at path once, and validates
// and compiles it as Load does (same errors, starting with path), with
// the SHA-256 of the bytes it read and now as its load time.
func LoadSnapshot(path string, now time.Time) (*Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := config.ParseFile(path, data)
	if err != nil {
		return nil, err
	}
	set, err := Compile(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sum := sha256.Sum256(data)
	return &Snapshot{Set: set, Hash: hex.EncodeToString(sum[:]), LoadedAt: now}, nil
}

// Live holds the snapshot a process runs on, and swaps it whole when the
// configuration is reloaded. Its methods are safe for concurrent use; it
// is a Source and a config.Source.
type Live struct {
	p atomic.Pointer[Snapshot]
}

// NewLive returns a Live holding s.
func NewLive(s *Snapshot) *Live {
	l := &Live{}
	l.p.Store(s)
	return l
}

// Snapshot returns the snapshot in force.
func (l *Live) Snapshot() *Snapshot { return l.p.Load() }

// Current returns the configuration of the snapshot in force.
func (l *Live) Current() *config.Config { return l.p.Load().Config() }

// Swap puts s in force and returns the snapshot it replaces. Whatever
// took the old one finishes with it.
func (l *Live) Swap(s *Snapshot) *Snapshot { return l.p.Swap(s) }
