package store

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.M(m))
}

// TestCursorFormsOfEarlierVersions checks that the cursors earlier
// versions handed out (a delivery's {"t","d"} and a forward's {"j"}) are
// still read, as what they were, by the one format.
func TestCursorFormsOfEarlierVersions(t *testing.T) {
	t.Parallel()
	enc := base64.RawURLEncoding.EncodeToString
	c, err := ParseDeliveryCursor(enc([]byte(`{"t":1795980667412000,"d":"evt_1"}`)))
	if err != nil || c.DeliveryID != "evt_1" || !c.ReceivedAt.Equal(time.UnixMicro(1795980667412000)) || c.JobID != 0 {
		t.Errorf("delivery cursor = %+v, %v", c, err)
	}
	c, err = ParseForwardCursor(enc([]byte(`{"j":42}`)))
	if err != nil || c.JobID != 42 || c.DeliveryID != "" {
		t.Errorf("forward cursor = %+v, %v", c, err)
	}
	if s := (Cursor{JobID: 42}).String(); s != enc([]byte(`{"j":42}`)) {
		t.Errorf("forward cursor encodes as %q", s)
	}
}

// TestFinishedForwardCursor: a forward's cursor in a list ordered by when
// forwards finished carries that time (microseconds) with the job ID, and
// reads back as it was; in any other spelling it is malformed.
func TestFinishedForwardCursor(t *testing.T) {
	t.Parallel()
	enc := base64.RawURLEncoding.EncodeToString
	at := time.UnixMicro(1795980667412345).UTC()
	s := Cursor{JobID: 42, FinishedAt: at}.String()
	if s != enc([]byte(`{"j":42,"t":1795980667412345}`)) {
		t.Errorf("finished forward cursor encodes as %q", s)
	}
	c, err := ParseForwardCursor(s)
	if err != nil || c.JobID != 42 || !c.FinishedAt.Equal(at) || c.DeliveryID != "" || !c.ReceivedAt.IsZero() {
		t.Errorf("finished forward cursor = %+v, %v", c, err)
	}
	if _, err := ParseForwardCursor(enc([]byte(`{"t":1795980667412345,"j":42}`))); !IsBadCursor(err) {
		t.Errorf("reordered fields: %v, want a bad cursor", err)
	}
	if _, err := ParseDeliveryCursor(s); !IsBadCursor(err) {
		t.Errorf("a finished forward cursor for deliveries: %v, want a bad cursor", err)
	}
}

// TestCursorOfTheOtherList checks that a list refuses the other list's
// cursors, and cursors that mix both, as malformed.
func TestCursorOfTheOtherList(t *testing.T) {
	t.Parallel()
	enc := base64.RawURLEncoding.EncodeToString
	delivery := Cursor{ReceivedAt: time.UnixMicro(1795980667412000), DeliveryID: "evt_1"}.String()
	job := Cursor{JobID: 7}.String()
	for name, err := range map[string]error{
		"delivery cursor for forwards": second(ParseForwardCursor(delivery)),
		"job cursor for deliveries":    second(ParseDeliveryCursor(job)),
		"both":                         second(ParseCursor(enc([]byte(`{"t":1,"d":"x","j":1}`)))),
		"job 0":                        second(ParseCursor(enc([]byte(`{"j":0}`)))),
		"negative job":                 second(ParseCursor(enc([]byte(`{"j":-3}`)))),
		"job as string":                second(ParseCursor(enc([]byte(`{"j":"3"}`)))),
	} {
		if !errors.Is(err, ErrBadCursor) || !IsBadCursor(err) {
			t.Errorf("%s: error %v, want ErrBadCursor", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }
