package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hookgate/hookgate/internal/idempotency"
)

// Cursor is a position in a list, opaque to clients. In a sender's
// deliveries it is the time received and ID of a page's last delivery. In
// a target's forwards it is the job ID of a page's last forward, and when it
// finished in a list ordered by that. The next page starts right after it.
// One kind of list refuses the other's cursors.
type Cursor struct {
	ReceivedAt time.Time
	DeliveryID string
	JobID      int64
	// FinishedAt is when a page's last forward finished, in a list ordered
	// by that; zero in a list ordered by job ID.
	FinishedAt time.Time
}

// cursorJSON is a Cursor's encoded form: a delivery's time in Unix
// microseconds and its ID, or a forward's job ID.
type cursorJSON struct {
	T *int64  `json:"t,omitempty"`
	D *string `json:"d,omitempty"`
	J *int64  `json:"j,omitempty"`
}

// String returns the cursor's opaque form: URL-safe base64, without
// padding, of a small JSON document. [ParseCursor] reads it back.
func (c Cursor) String() string {
	var b []byte
	switch {
	case c.JobID != 0 && !c.FinishedAt.IsZero():
		b = []byte(`{"j":` + strconv.FormatInt(c.JobID, 10) + `,"t":` + strconv.FormatInt(c.FinishedAt.UnixMicro(), 10) + `}`)
	case c.JobID != 0:
		b = []byte(`{"j":` + strconv.FormatInt(c.JobID, 10) + `}`)
	default:
		t := c.ReceivedAt.UnixMicro()
		var err error
		if b, err = json.Marshal(cursorJSON{T: &t, D: &c.DeliveryID}); err != nil { // an int and a string always encode
			panic(err)
		}
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// ErrBadCursor is what every malformed cursor's error wraps.
var ErrBadCursor = errors.New("malformed cursor")

// IsBadCursor reports whether err is the error of a malformed cursor, or of
// a cursor of another kind of list.
func IsBadCursor(err error) bool { return errors.Is(err, ErrBadCursor) }

// ParseCursor returns the Cursor whose String is s. Its error wraps
// [ErrBadCursor] for anything String cannot have produced: bad base64 or
// JSON, unknown or missing fields, a delivery ID no delivery can have
// ([idempotency.CheckDeliveryID]), a job ID below 1, or another spelling.
func ParseCursor(s string) (Cursor, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return Cursor{}, fmt.Errorf("%w: %w", ErrBadCursor, err)
	}
	var cj cursorJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cj); err != nil {
		return Cursor{}, fmt.Errorf("%w: %w", ErrBadCursor, err)
	}
	var c Cursor
	switch {
	case cj.J != nil && cj.D == nil:
		if *cj.J < 1 {
			return Cursor{}, fmt.Errorf("%w: job ID %d", ErrBadCursor, *cj.J)
		}
		c.JobID = *cj.J
		if cj.T != nil {
			c.FinishedAt = time.UnixMicro(*cj.T).UTC()
		}
	case cj.J == nil && cj.T != nil && cj.D != nil:
		if why := idempotency.CheckDeliveryID(*cj.D); why != "" { // what no delivery can have never reaches the database
			return Cursor{}, fmt.Errorf("%w: its delivery ID %s", ErrBadCursor, why)
		}
		c.ReceivedAt, c.DeliveryID = time.UnixMicro(*cj.T).UTC(), *cj.D
	default:
		return Cursor{}, fmt.Errorf("%w: not a cursor of hookgate", ErrBadCursor)
	}
	if c.String() != s { // trailing data, reordered fields, …
		return Cursor{}, fmt.Errorf("%w: not in canonical form", ErrBadCursor)
	}
	return c, nil
}

// ParseDeliveryCursor is [ParseCursor] for a list of deliveries, where a
// forward's cursor is malformed.
func ParseDeliveryCursor(s string) (Cursor, error) {
	c, err := ParseCursor(s)
	if err == nil && c.JobID != 0 {
		err = fmt.Errorf("%w: a cursor of forwards, not of deliveries", ErrBadCursor)
	}
	return c, err
}

// ParseForwardCursor is [ParseCursor] for a list of forwards, where a
// delivery's cursor is malformed.
func ParseForwardCursor(s string) (Cursor, error) {
	c, err := ParseCursor(s)
	if err == nil && c.JobID == 0 {
		err = fmt.Errorf("%w: a cursor of deliveries, not of forwards", ErrBadCursor)
	}
	return c, err
}
