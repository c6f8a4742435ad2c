package sender

import (
	"crypto/sha256"
	"net/http"
)

// DeliveryIDOf returns the delivery ID that [Sender.Prepare] finds in a
// request with headers h and the decompressed body, without checking its
// signature. `hookgate rules test` reads it for the rules' delivery_id.
func (s *Sender) DeliveryIDOf(h http.Header, body []byte) (string, error) {
	in := s.Inspect(body)
	return s.deliveryID(h, sha256.Sum256(s.StoredBody(body, h.Get("Content-Type"))), &in)
}
