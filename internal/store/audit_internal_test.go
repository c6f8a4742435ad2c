package store

import (
	"testing"
	"time"

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

// A token's refused requests write at most 60 rows a minute; the next
// refused row after a full minute says how many were left out. Rows of
// actions carried out are never left out.
func TestAuditRefusedRowsBoundedPerToken(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	q := New(pool)
	ctx := t.Context()
	refused := AuditEntry{Token: "grafana", Action: ActionOther, Outcome: OutcomeRefused, Detail: "scope-missing"}
	for range maxRefusedRows + 10 {
		if err := q.RecordAudit(ctx, refused); err != nil {
			t.Fatal(err)
		}
	}
	// Another token, and actions carried out, are not held back.
	for _, e := range []AuditEntry{{Token: "other-reader", Action: ActionOther, Outcome: OutcomeRefused},
		{Token: "grafana", Action: ActionSignIn, Outcome: OutcomeOK}} {
		if err := q.RecordAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	count := func(where string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE `+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(`token_name = 'grafana' AND outcome = 'refused'`); n != maxRefusedRows {
		t.Errorf("%d refused rows of grafana, want %d", n, maxRefusedRows)
	}
	if count(`token_name = 'other-reader'`) != 1 || count(`token_name = 'grafana' AND outcome = 'ok'`) != 1 {
		t.Error("a row of another token or of an action carried out was left out")
	}
	// A minute later, the next refused row says 10 were left out.
	q.refused.byTk["grafana"].start = time.Now().Add(-refusedRowsWindow)
	if err := q.RecordAudit(ctx, refused); err != nil {
		t.Fatal(err)
	}
	if n := count(`token_name = 'grafana' AND (details->>'refusals_not_recorded')::int = 10`); n != 1 {
		t.Errorf("%d rows say 10 refusals were left out, want 1", n)
	}
}
