package main

import (
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// TestLinguisticCollationWarned: a gateway whose database compares the
// keys under a linguistic collation (here ICU's root locale on
// processed_messages' delivery IDs) says so once at start, naming it; one
// on a database of collation "C", as make run's and the tests', says
// nothing.
func TestLinguisticCollationWarned(t *testing.T) {
	t.Parallel()
	plainPool, plain := pgtest.NewDB(t)
	var hasICU bool
	if err := plainPool.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM pg_collation WHERE collname = 'und-x-icu')`).Scan(&hasICU); err != nil {
		t.Fatal(err)
	}
	if !hasICU {
		t.Skip("this PostgreSQL is built without ICU: no linguistic collation is sure to exist")
	}
	_, icu := pgtest.NewDB(t)
	adminExec(t, icu, `ALTER TABLE processed_messages ALTER COLUMN delivery_id TYPE text COLLATE "und-x-icu"`)

	if n := startRun(t, plain).log.count(collationWarning); n != 0 {
		t.Errorf("the gateway on a database of collation C warned %d times about its collation", n)
	}
	s := startRun(t, icu)
	if n := s.log.count(collationWarning); n != 1 {
		t.Fatalf("the gateway on keys of collation und-x-icu warned %d times about it, want once", n)
	}
	if log := s.log.tail(1000); !strings.Contains(log, `"collation":"und-x-icu"`) || !strings.Contains(log, `"provider":"i"`) {
		t.Errorf("the warning does not name the collation und-x-icu of provider i:\n%s", log)
	}
}

// TestByteOrder: only libc's C, POSIX and C.UTF-8 and the builtin
// provider's collations order by bytes at a byte comparison's cost.
func TestByteOrder(t *testing.T) {
	for _, tc := range []struct {
		provider, collate string
		want              bool
	}{
		{"c", "C", true}, {"c", "POSIX", true}, {"c", "C.UTF-8", true}, {"c", "C.utf8", true}, {"b", "", true},
		{"c", "en_US.UTF-8", false}, {"c", "en_US.utf8", false}, {"i", "", false}, {"d", "", false},
	} {
		if got := byteOrder(tc.provider, tc.collate); got != tc.want {
			t.Errorf("byteOrder(%q, %q) = %v, want %v", tc.provider, tc.collate, got, tc.want)
		}
	}
}
