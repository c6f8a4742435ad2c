package store

import (
	"testing"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// Details just under the bound in Go's JSON are within the table's bound
// in PostgreSQL's, which writes a space after every comma: they are kept,
// not refused by the CHECK. Details over it are replaced, not lost.
func TestAuditDetailsWithinTheTablesBound(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	q := New(pool)
	ones := make([]int, (maxAuditDetailsBytes-10)/2) // [1,1,…]: 2 bytes each in Go, 3 in PostgreSQL
	for i := range ones {
		ones[i] = 1
	}
	for _, d := range []map[string]any{{"n": ones}, {"n": append(ones, make([]int, 100)...)}} {
		if err := q.RecordAudit(t.Context(), AuditEntry{Token: "admin", Action: ActionOther, Outcome: OutcomeOK, Details: d}); err != nil {
			t.Fatalf("details of %d numbers: %v", len(d["n"].([]int)), err)
		}
	}
	page, err := q.ListAudit(t.Context(), AuditFilter{}, 10, "")
	if err != nil || len(page.Entries) != 2 {
		t.Fatalf("%d rows (%v), want 2", len(page.Entries), err)
	}
	if _, ok := page.Entries[0].Details["truncated"]; !ok {
		t.Errorf("the larger details are kept as %v, want truncated", page.Entries[0].Details)
	}
	if n, _ := page.Entries[1].Details["n"].([]any); len(n) != len(ones) {
		t.Errorf("the details within the bound kept %d numbers, want %d", len(n), len(ones))
	}
}
