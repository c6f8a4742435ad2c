// Package idempotency holds the values that identify a webhook delivery and
// the response stored for it. Package dedup claims a [Key] in one
// transaction per [Delivery]; package store reads the keys back. It imports
// nothing of hookgate's, so both can depend on it.
package idempotency

import (
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Key identifies a delivery: the sender's name and the sender's delivery ID.
type Key struct {
	Sender     string
	DeliveryID string
}

// Response is a stored HTTP response.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
}

// Delivery is one attempt to deliver a message.
type Delivery struct {
	Key
	// RequestSHA256 fingerprints the request body. A later delivery with
	// the same key and another fingerprint is a mismatch.
	RequestSHA256 [32]byte
	// EventID is the event this delivery creates if it is new. It must be
	// fresh: the statements of the state change recognise the claim by it.
	EventID uuid.UUID
	// Response is stored with the key and returned if the delivery is new.
	Response Response
	// ReceivedAt is when the delivery arrived.
	ReceivedAt time.Time
	// ExpiresAt is when its key may be forgotten.
	ExpiresAt time.Time
}

// MaxDeliveryIDBytes is the longest delivery ID ingest accepts.
const MaxDeliveryIDBytes = 255

// CheckDeliveryID returns why id cannot be a delivery ID, or "". Ingest
// refuses an empty ID, one over [MaxDeliveryIDBytes] and one with a byte
// outside visible ASCII. Such an ID names no stored delivery, so callers
// answer 400 or 404 without asking the database. The database would refuse
// a NUL or invalid UTF-8 with an error, not with "no such row".
func CheckDeliveryID(id string) string {
	if id == "" {
		return "is empty"
	}
	if len(id) > MaxDeliveryIDBytes {
		return fmt.Sprintf("is %d bytes long; at most %d are allowed", len(id), MaxDeliveryIDBytes)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return fmt.Sprintf("has a byte outside visible ASCII at position %d (spaces and control characters are not allowed)", i)
		}
	}
	return ""
}
