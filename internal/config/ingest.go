package config

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
