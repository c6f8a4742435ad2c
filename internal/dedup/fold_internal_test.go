package dedup

import (
	"errors"
	"strings"
	"testing"

	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// foldedMarkSQL is rowMarkSQL in the form that folds into the claim: its
// guard is a ClaimedJoin. A negative n fails its row (CHECK).
var foldedMarkSQL = Foldable(`INSERT INTO folded_marks (sender, event_id, delivery_id, n)
SELECT k.sender, m.* FROM unnest($2::uuid[], $3::text[], $4::int8[]) AS m(event_id, delivery_id, n)
` + ClaimedJoin("m.delivery_id", "m.event_id"))

func foldedMarks(d idempotency.Delivery, ns ...int64) Change {
	return func(b *Batch) {
		for _, n := range ns {
			b.Row(foldedMarkSQL, [16]byte(d.EventID), d.DeliveryID, n)
		}
	}
}

// foldedStore is batchStore, on PostgreSQL: Citus runs the statement
// forms without folding.
func foldedStore(t *testing.T) *Store {
	t.Helper()
	if pgtest.Citus() {
		t.Skip("Citus runs the statement forms without folding")
	}
	s, _, _ := batchStore(t) // with folded_marks
	return s
}

// TestFoldedRowsFollowTheClaim: on PostgreSQL a foldable statement runs
// inside the claim's statement, its parameters after the claim's, and a
// statement that is not foldable still runs on its own. Each delivery's
// rows are written only when its own claim took its key: none for a key
// stored before, none for the second delivery of a key in the batch, and
// all of them for the others, in both statements.
func TestFoldedRowsFollowTheClaim(t *testing.T) {
	t.Parallel()
	s := foldedStore(t)
	ctx := t.Context()
	stored := delivery(t, "f", "stored", "p")
	if res, err := s.runSingle(ctx, stored, foldedMarks(stored, 1), true); err != nil || res.Replayed {
		t.Fatalf("first delivery of the stored key: %+v, %v", res, err)
	}
	a, b, c := delivery(t, "f", "a", "p"), delivery(t, "f", "b", "p"), delivery(t, "f", "c", "p")
	again, twice := delivery(t, "f", "stored", "p"), delivery(t, "f", "a", "p")
	ds := []idempotency.Delivery{a, b, again, c, twice}
	changes := []Change{
		allOf(foldedMarks(a, 1, 2), rowMarks(a, 2)),
		allOf(foldedMarks(b), rowMarks(b, 0)),
		allOf(foldedMarks(again, 1, 2, 3), rowMarks(again, 3)),
		allOf(foldedMarks(c, 7), rowMarks(c, 1)),
		allOf(foldedMarks(twice, 5), rowMarks(twice, 1)),
	}

	p, err := s.plan(ds, changes, s.batchLockTimeout, true)
	if err != nil {
		t.Fatal(err)
	}
	claim := p.stmts[p.claim]
	if !p.folded || !strings.HasPrefix(claim.sql, "WITH k AS (\n"+claimSQL) || !strings.Contains(claim.sql, "INSERT INTO folded_marks") {
		t.Fatalf("the claim is not folded with the foldable statement:\n%s", claim.sql)
	}
	if len(claim.args) != claimParams+3 || len(claim.args[claimParams].(column)) != 7 {
		t.Errorf("the folded claim carries %d parameters, want %d, the folded statement's first of 7 rows (2+0+3+1+1)", len(claim.args), claimParams+3)
	}
	for i, st := range p.stmts {
		if st.sql == foldedMarkSQL {
			t.Errorf("statement %d runs the foldable statement on its own", i)
		}
	}
	if n := strings.Count(strings.Join(stmtSQL(p), "\n"), "INSERT INTO row_marks"); n != 1 {
		t.Errorf("the statement that is not foldable runs %d times, want once on its own", n)
	}

	cs := calls(ctx, changes, ds...)
	s.runBatch(cs)
	for i, want := range [][2]int{{2, 2}, {0, 0}, {0, 0}, {1, 1}, {0, 0}} {
		c := cs[i]
		if c.err != nil || c.res.Replayed != (i == 2 || i == 4) {
			t.Errorf("%s (%d): %+v, %v", c.d.DeliveryID, i, c.res, c.err)
		}
		var folded, own int
		if err := s.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM folded_marks WHERE event_id = $1), (SELECT count(*) FROM row_marks WHERE event_id = $1)`,
			c.d.EventID).Scan(&folded, &own); err != nil {
			t.Fatal(err)
		}
		if folded != want[0] || own != want[1] {
			t.Errorf("%s (%d): %d folded and %d own rows written, want %d and %d", c.d.DeliveryID, i, folded, own, want[0], want[1])
		}
	}
}

// TestFoldedRowFailureRollsBack: a folded statement that fails fails its
// delivery with an error that is not a duplicate, and nothing of it stays:
// not its key, not its rows. The sender's retry then succeeds.
func TestFoldedRowFailureRollsBack(t *testing.T) {
	t.Parallel()
	s := foldedStore(t)
	ctx := t.Context()
	d := delivery(t, "f", "bad", "p")
	_, err := s.runSingle(ctx, d, foldedMarks(d, 1, -1), true)
	if err == nil || errors.Is(err, errClaimConflict) || IsDuplicate(err) || !strings.Contains(err.Error(), "folded_marks_n_check") {
		t.Fatalf("a failing folded row: %v, want its CHECK violation, not a duplicate", err)
	}
	var keys, rows int
	if err := s.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM processed_messages WHERE sender = 'f'), (SELECT count(*) FROM folded_marks)`).Scan(&keys, &rows); err != nil {
		t.Fatal(err)
	}
	if keys != 0 || rows != 0 {
		t.Fatalf("after the failure: %d keys and %d rows stored, want none", keys, rows)
	}
	retry := d
	if res, err := s.runSingle(ctx, retry, foldedMarks(retry, 1, 2), true); err != nil || res.Replayed {
		t.Fatalf("the retry: %+v, %v", res, err)
	}
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM folded_marks WHERE event_id = $1`, d.EventID).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("the retry wrote %d rows (%v), want 2", rows, err)
	}
}

// TestFoldableRefuses: Foldable accepts only an INSERT guarded by one
// ClaimedJoin, and renumbers each folded statement's parameters after
// those before it.
func TestFoldableRefuses(t *testing.T) {
	for _, sql := range []string{
		`UPDATE t SET x = 1 FROM unnest($2::text[]) AS m(x) ` + ClaimedJoin("m.x", "m.x"),
		`INSERT INTO t SELECT $1, m.* FROM unnest($2::text[]) AS m(x) WHERE ` + ClaimedRow("m.x", "m.x"),
		`INSERT INTO t SELECT k.sender FROM unnest($2::text[]) AS m(x) ` + ClaimedJoin("m.x", "m.x") + ` RETURNING x`,
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Foldable accepted %q", sql)
				}
			}()
			Foldable(sql)
		}()
	}
	if got, want := shiftParams("a $1 $2 $10 $ $x", 9), "a $1 $11 $19 $ $x"; got != want {
		t.Errorf("shiftParams: %q, want %q", got, want)
	}
}

func allOf(cs ...Change) Change {
	return func(b *Batch) {
		for _, c := range cs {
			c(b)
		}
	}
}

func stmtSQL(p *plan) []string {
	out := make([]string, len(p.stmts))
	for i, st := range p.stmts {
		out[i] = st.sql
	}
	return out
}
