package pgarray_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookgate/hookgate/internal/pgarray"
)

// TestSameBytesFewerAllocations: each array encodes to the bytes pgx
// writes for the plain slice, NULLs included, in binary and in text, and
// allocates nothing per element where pgx's own encoding allocates one.
func TestSameBytesFewerAllocations(t *testing.T) { //nolint:paralleltest // testing.AllocsPerRun refuses a parallel test
	m := pgtype.NewMap()
	s1, s2 := "a,b", `q"uote`
	t1 := time.Date(2026, 12, 5, 8, 0, 0, 123000, time.UTC)
	t2 := t1.Add(time.Hour)
	n1, n2 := int64(1)<<40, int64(-7)
	u1 := pgtype.UUID{Bytes: [16]byte{1, 2, 3}, Valid: true}
	u2 := pgtype.UUID{Bytes: [16]byte{9}, Valid: true}
	many := make([]string, 100)
	for i := range many {
		many[i] = "target-name"
	}
	for _, tc := range []struct {
		name       string
		oid        uint32
		ours, pgxs any
		perElement bool // pgx's own encoding allocates per element
	}{
		{"texts", pgtype.TextArrayOID, pgarray.Texts{s1, s2, ""}, []string{s1, s2, ""}, true},
		{"many texts", pgtype.TextArrayOID, pgarray.Texts(many), many, true},
		{"null texts", pgtype.TextArrayOID, pgarray.NullTexts{&s1, nil, &s2}, []*string{&s1, nil, &s2}, true},
		{"times", pgtype.TimestamptzArrayOID, pgarray.Times{t1, t2}, []time.Time{t1, t2}, true},
		{"null times", pgtype.TimestamptzArrayOID, pgarray.NullTimes{nil, &t2}, []*time.Time{nil, &t2}, true},
		{"uuids", pgtype.UUIDArrayOID, pgarray.UUIDs{u1, {}, u2}, []pgtype.UUID{u1, {}, u2}, true},
		{"int8", pgtype.Int8ArrayOID, pgarray.Int64s{n1, n2}, []int64{n1, n2}, true},
		{"null int8", pgtype.Int8ArrayOID, pgarray.NullInt64s{nil, &n1}, []*int64{nil, &n1}, true},
		{"int2", pgtype.Int2ArrayOID, pgarray.Int64s{204, 503}, []int16{204, 503}, false},
		{"bytea", pgtype.ByteaArrayOID, pgarray.Bytes{[]byte("ok"), nil, {}}, [][]byte{[]byte("ok"), nil, {}}, false},
		{"empty", pgtype.TextArrayOID, pgarray.Texts{}, []string{}, false},
	} {
		for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
			got, err := m.Encode(tc.oid, format, tc.ours, nil)
			if err != nil {
				t.Fatalf("%s (format %d): %v", tc.name, format, err)
			}
			want, err := m.Encode(tc.oid, format, tc.pgxs, nil)
			if err != nil {
				t.Fatalf("%s (format %d), pgx's: %v", tc.name, format, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s (format %d): %q, pgx writes %q", tc.name, format, got, want)
			}
		}
		buf := make([]byte, 0, 8192)
		ours := testing.AllocsPerRun(20, func() { _, _ = m.Encode(tc.oid, pgtype.BinaryFormatCode, tc.ours, buf[:0]) })
		theirs := testing.AllocsPerRun(20, func() { _, _ = m.Encode(tc.oid, pgtype.BinaryFormatCode, tc.pgxs, buf[:0]) })
		if ours > 2 {
			t.Errorf("%s: %.0f allocations per encoding, want at most 2 (the dimensions), whatever the length", tc.name, ours)
		}
		if tc.perElement && ours >= theirs {
			t.Errorf("%s: %.0f allocations, pgx's own %.0f: want fewer", tc.name, ours, theirs)
		}
	}
}

// TestInt2OutOfRange: a value an int2 cannot hold is an error, not a
// wrapped number.
func TestInt2OutOfRange(t *testing.T) {
	t.Parallel()
	if _, err := pgtype.NewMap().Encode(pgtype.Int2ArrayOID, pgtype.BinaryFormatCode, pgarray.Int64s{1 << 20}, nil); err == nil {
		t.Error("1<<20 into int2[]: no error")
	}
}

// TestRegisterNamesEachType: a connection in exec mode finds each type's
// PostgreSQL type by its Go type alone (pgtype.Map.TypeForValue), and
// encodes it as text: without Register it finds none, and pgx refuses to
// encode the parameter ("unknown type (OID 0)").
func TestRegisterNamesEachType(t *testing.T) {
	t.Parallel()
	s := "x"
	at := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	n := int64(3)
	for _, tc := range []struct {
		v   any
		oid uint32
	}{
		{pgarray.Texts{"a"}, pgtype.TextArrayOID}, {pgarray.NullTexts{&s, nil}, pgtype.TextArrayOID},
		{pgarray.Times{at}, pgtype.TimestamptzArrayOID}, {pgarray.NullTimes{nil, &at}, pgtype.TimestamptzArrayOID},
		{pgarray.UUIDs{{Bytes: [16]byte{1}, Valid: true}}, pgtype.UUIDArrayOID},
		{pgarray.Int64s{n}, pgtype.Int8ArrayOID}, {pgarray.NullInt64s{&n, nil}, pgtype.Int8ArrayOID},
		{pgarray.Bytes{[]byte("ok"), nil}, pgtype.ByteaArrayOID},
	} {
		m := pgtype.NewMap()
		if typ, ok := m.TypeForValue(tc.v); ok {
			t.Fatalf("%T: type %s known before Register: the test proves nothing", tc.v, typ.Name)
		}
		pgarray.Register(m)
		typ, ok := m.TypeForValue(tc.v)
		if !ok || typ.OID != tc.oid {
			t.Errorf("%T: type %v (%v), want OID %d", tc.v, typ, ok, tc.oid)
			continue
		}
		if _, err := m.Encode(typ.OID, pgtype.TextFormatCode, tc.v, nil); err != nil {
			t.Errorf("%T as text: %v", tc.v, err)
		}
	}
}
