package forward

import (
	"net/http"
	"testing"
	"time"
)

// TestParseRetryAfter: Retry-After in seconds or as an HTTP date, from
// now. A huge value saturates at maxRetryAfter (before, 99999999999999
// seconds × time.Second overflowed int64, and more digits than an int64
// holds read as no Retry-After at all); a negative or fractional number,
// a date in the past and garbage are no Retry-After.
func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"1", time.Second},
		{"120", 2 * time.Minute},
		{" 7 ", 7 * time.Second},
		{"31536000", maxRetryAfter}, // a year: the ceiling itself
		{"31536001", maxRetryAfter},
		{"99999999999999", maxRetryAfter},          // × 1e9 ns overflows int64
		{"9223372036854775807", maxRetryAfter},     // the largest int64
		{"99999999999999999999999", maxRetryAfter}, // more digits than an int64 holds
		{"-5", 0},
		{"+5", 0},
		{"1.5", 0},
		{"5s", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Format(http.TimeFormat), 0},
		{"Fri, 31 Dec 9999 23:59:59 GMT", maxRetryAfter}, // t.Sub(now) saturates at the largest Duration
		{"Wed, 02 Dec 2026 12:00:60 GMT", 0},             // not a date
	} {
		got := parseRetryAfter(tc.v, now)
		if got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.v, got, tc.want)
		}
		if got < 0 || got > maxRetryAfter {
			t.Errorf("parseRetryAfter(%q) = %v: out of [0, %v]", tc.v, got, maxRetryAfter)
		}
	}
}

