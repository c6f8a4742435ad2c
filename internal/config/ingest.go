package config

// AcceptsEncoding reports whether the sender accepts bodies in the
// Content-Encoding enc. Every sender accepts identity.
func (s *Sender) AcceptsEncoding(enc string) bool {
	for _, e := range s.AcceptEncodings {
		if e == enc {
			return true
		}
	}
	return false
}
