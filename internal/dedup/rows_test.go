package dedup

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookgate/hookgate/internal/idempotency"
)

// rowMarkSQL is a multi-row state change's statement, guarded by
// ClaimedRow; rowMarks(d, n) writes n rows of it for d.
var rowMarkSQL = `INSERT INTO row_marks (sender, event_id, delivery_id, n)
SELECT $1::text, m.* FROM unnest($2::uuid[], $3::text[], $4::int8[]) AS m(event_id, delivery_id, n)
WHERE ` + ClaimedRow("m.delivery_id", "m.event_id")

func rowMarks(d idempotency.Delivery, n int) Change {
	return func(b *Batch) {
		for i := range n {
			b.Row(rowMarkSQL, [16]byte(d.EventID), d.DeliveryID, int64(i))
		}
	}
}

// TestBatchRowsOneStatementPerSQL: the rows the deliveries of a batch add
// with one statement are written by ONE execution of it, each delivery's
// rows only when its own claim took its key: a delivery whose key another
// delivery holds writes none, one with no rows none, the others all theirs.
func TestBatchRowsOneStatementPerSQL(t *testing.T) {
	t.Parallel()
	s, ctx, _ := batchStore(t)
	stored := delivery(t, "r", "stored", "p")
	if res, err := s.runSingle(ctx, stored, rowMarks(stored, 1), true); err != nil || res.Replayed {
		t.Fatalf("first delivery of the stored key: %+v, %v", res, err)
	}
	a, b, c := delivery(t, "r", "a", "p"), delivery(t, "r", "b", "p"), delivery(t, "r", "c", "p")
	again := delivery(t, "r", "stored", "p")
	ds := []idempotency.Delivery{a, b, again, c}
	changes := []Change{rowMarks(a, 2), rowMarks(b, 0), rowMarks(again, 3), rowMarks(c, 1)}

	p, err := s.plan(ds, changes, s.batchLockTimeout, true)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, st := range p.stmts {
		if st.sql == rowMarkSQL {
			n++
			if got := len(st.args[1].(column)); got != 6 {
				t.Errorf("the row statement carries %d rows, want 6 (2+0+3+1)", got)
			}
		}
	}
	if n != 1 {
		t.Errorf("the batch's plan has %d executions of the row statement, want 1", n)
	}

	cs := calls(ctx, changes, ds...)
	s.runBatch(cs)
	for i, want := range []int{2, 0, 0, 1} {
		c := cs[i]
		if c.err != nil || c.res.Replayed != (c.d.DeliveryID == "stored") {
			t.Errorf("%s: %+v, %v", c.d.DeliveryID, c.res, c.err)
		}
		var got int
		if err := s.db.QueryRow(ctx, `SELECT count(*) FROM row_marks WHERE event_id = $1`, c.d.EventID).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: %d rows written, want %d", c.d.DeliveryID, got, want)
		}
	}
}

// TestRowsOfOneStatementDisagree: rows of one statement with different
// numbers of values fail the delivery (nothing recorded), not the process.
func TestRowsOfOneStatementDisagree(t *testing.T) {
	t.Parallel()
	s, ctx, _ := batchStore(t)
	d := delivery(t, "r", "bad", "p")
	_, err := s.runSingle(ctx, d, func(b *Batch) {
		b.Row(rowMarkSQL, [16]byte(d.EventID), d.DeliveryID, int64(1))
		b.Row(rowMarkSQL, [16]byte(d.EventID), d.DeliveryID)
	}, true)
	if err == nil || IsDuplicate(err) {
		t.Fatalf("rows with 3 and 2 values: %v; want an error", err)
	}
	var n int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM processed_messages WHERE delivery_id = 'bad'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("key rows: %d, %v; want 0", n, err)
	}
}

// TestRowValuesRoundTrip: every value type a row may carry, NULL included,
// arrives in PostgreSQL as the same value (the arrays are encoded by hand).
func TestRowValuesRoundTrip(t *testing.T) {
	t.Parallel()
	s, ctx, _ := batchStore(t)
	const sql = `INSERT INTO typed SELECT $1::text, v.* FROM unnest($2::text[], $3::bytea[], $4::uuid[], $5::int2[], $6::int8[], $7::bool[], $8::timestamptz[], $9::jsonb[], $10::text[])
  AS v(t, b, u, s, i, f, ts, j, k) WHERE ` + `EXISTS (SELECT FROM processed_messages k WHERE k.sender = $1 AND k.delivery_id = v.k OFFSET 0)`
	d := delivery(t, "typed", "x", "p")
	ts := time.Date(2026, 11, 30, 8, 1, 2, 345678000, time.UTC)
	if _, err := s.runSingle(ctx, d, func(b *Batch) {
		b.Row(sql, "tëxt", []byte{0, 1, 255}, [16]byte(d.EventID), int16(-7), int64(1<<40), true, ts, []byte(`{"a":[1,"b"]}`), "x")
		b.Row(sql, "", []byte{}, nil, nil, nil, false, nil, nil, "x")
	}, true); err != nil {
		t.Fatal(err)
	}
	var (
		txt        string
		bin        []byte
		u          pgtype.UUID
		sm         pgtype.Int2
		big        pgtype.Int8
		flag       bool
		when       pgtype.Timestamptz
		doc        []byte
		nulls, all int
	)
	if err := s.db.QueryRow(ctx, `SELECT t, b, u, s, i, f, ts, j::text FROM typed WHERE f`).Scan(&txt, &bin, &u, &sm, &big, &flag, &when, &doc); err != nil {
		t.Fatal(err)
	}
	var gotDoc, wantDoc any
	_ = json.Unmarshal(doc, &gotDoc)
	_ = json.Unmarshal([]byte(`{"a":[1,"b"]}`), &wantDoc)
	if txt != "tëxt" || !bytes.Equal(bin, []byte{0, 1, 255}) || u.Bytes != d.EventID || sm.Int16 != -7 || big.Int64 != 1<<40 || !flag || !when.Time.Equal(ts) || !jsonEqual(gotDoc, wantDoc) {
		t.Errorf("row read back as %q %x %x %d %d %v %v %s", txt, bin, u.Bytes, sm.Int16, big.Int64, flag, when.Time, doc)
	}
	if err := s.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE u IS NULL AND s IS NULL AND i IS NULL AND ts IS NULL AND j IS NULL AND t = '' AND b = ''), count(*) FROM typed`).Scan(&nulls, &all); err != nil {
		t.Fatal(err)
	}
	if nulls != 1 || all != 2 {
		t.Errorf("%d rows with the NULLs and empty values sent, %d rows; want 1 and 2", nulls, all)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestRowValueOfUnknownType: a row value the arrays cannot carry fails its
// delivery with an error (nothing recorded), and the store goes on working.
func TestRowValueOfUnknownType(t *testing.T) {
	t.Parallel()
	s, ctx, _ := batchStore(t)
	d := delivery(t, "r", "float", "p")
	_, err := s.runSingle(ctx, d, func(b *Batch) {
		b.Row(rowMarkSQL, [16]byte(d.EventID), d.DeliveryID, 1.5) // int8 column, float64 value
	}, true)
	if err == nil || IsDuplicate(err) {
		t.Fatalf("a float64 for an int8 column: %v; want an error", err)
	}
	var n int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM processed_messages WHERE delivery_id = 'float'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("key rows: %d, %v; want 0", n, err)
	}
	again := delivery(t, "r", "float", "p")
	if res, err := s.runSingle(ctx, again, rowMarks(again, 1), true); err != nil || res.Replayed {
		t.Errorf("the sender's retry with a valid change: %+v, %v; want new", res, err)
	}
}
