package handler

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
)

// accepted is the 202 body appendAccepted writes, in its field order, for
// encoding/json to encode.
type accepted struct {
	EventID    uuid.UUID `json:"event_id"`
	Sender     string    `json:"sender"`
	DeliveryID string    `json:"delivery_id"`
	ReceivedAt time.Time `json:"received_at"`
}

// TestAppendAcceptedIsEncodingJSON: the hand-written 202 body is byte for
// byte what encoding/json makes of accepted, plus a newline, for delivery
// IDs with every kind of visible ASCII and beyond.
func TestAppendAcceptedIsEncodingJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 5, 6, 7, 123456000, time.UTC)
	for _, id := range []string{"d1", `a"b\c`, "<script>&amp;", "~!@#$%^*()_+{}|:?`", "tab\there", "é", "x\xff"} {
		eventID := uuid.MustParse("01936f4e-8a2b-7c3d-9e4f-0123456789ab")
		want, err := json.Marshal(accepted{EventID: eventID, Sender: "github", DeliveryID: id, ReceivedAt: at})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		if got := appendAccepted(nil, eventID, "github", id, at); string(got) != string(want) {
			t.Errorf("delivery ID %q:\n got %s\nwant %s", id, got, want)
		}
	}
}
