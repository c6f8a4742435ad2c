package config

import (
	"fmt"

	"github.com/hookgate/hookgate/internal/events"
)

// resolveIngest checks and resolves the fields of s that shape what ingest
// accepts and stores: its header filter.
func resolveIngest(s *Sender) error {
	for i, n := range s.StoreHeaders {
		if events.NeverStored(n) {
			return fmt.Errorf("store_headers[%d]: %s is never stored (it carries the client's or a proxy's credentials)", i, n)
		}
	}
	s.HeaderFilter = events.NewHeaderFilter(s.StoreHeaders, s.DropHeaders)
	return nil
}

// AcceptsEncoding reports whether the sender accepts bodies in the
// Content-Encoding enc (besides identity, which every sender accepts).
func (s *Sender) AcceptsEncoding(enc string) bool {
	for _, e := range s.AcceptEncodings {
		if e == enc {
			return true
		}
	}
	return false
}
