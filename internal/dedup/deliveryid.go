package dedup

import "fmt"

// MaxDeliveryIDBytes is the longest delivery ID ingest accepts.
const MaxDeliveryIDBytes = 255

// CheckDeliveryID returns why id cannot be a delivery ID (empty, over
// MaxDeliveryIDBytes, a byte outside visible ASCII: what ingest refuses),
// or "". A value it refuses names no stored delivery, so callers answer
// 400 or 404 without asking the database (which refuses a NUL or invalid
// UTF-8 with an error, not with "no such row").
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
