// Package pgarray holds array parameters that pgx encodes without an
// allocation per element.
//
// pgx encodes a []string, a []time.Time or a []*string through its
// generic array plan, which hands each element over as an interface
// value: one allocation per element that is not pointer-shaped, and a
// reflection per element for slices of pointers. The fast path's recording
// sends a dozen such arrays per batch, one element per forward, so these
// allocations were a fifth of a forward's (the garbage collector then
// pays for them again). The types here hand over a pointer-shaped
// reference to the element instead, which implements the Valuer interface
// pgtype's codec accepts for the column's type: no allocation, and one
// plan per array. They only encode; a nil element of a Null* type is NULL.
package pgarray

import (
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// dims returns the dimensions of a one-dimensional array of n elements.
func dims(n int) []pgtype.ArrayDimension {
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}} //nolint:gosec // a batch's length, far below 2^31
}

// text is a reference to a text element; nil is NULL.
type text struct{ p *string }

func (t text) TextValue() (pgtype.Text, error) {
	if t.p == nil {
		return pgtype.Text{}, nil
	}
	return pgtype.Text{String: *t.p, Valid: true}, nil
}

// Texts is a text[] parameter.
type Texts []string

func (a Texts) Dimensions() []pgtype.ArrayDimension { return dims(len(a)) }
func (a Texts) Index(i int) any                     { return text{&a[i]} }
func (a Texts) IndexType() any                      { return text{} }

// NullTexts is a text[] parameter whose nil elements are NULL.
type NullTexts []*string

func (a NullTexts) Dimensions() []pgtype.ArrayDimension { return dims(len(a)) }
func (a NullTexts) Index(i int) any                     { return text{a[i]} }
func (a NullTexts) IndexType() any                      { return text{} }

// timestamp is a reference to a timestamptz element; nil is NULL.
type timestamp struct{ p *time.Time }

func (t timestamp) TimestamptzValue() (pgtype.Timestamptz, error) {
	if t.p == nil {
		return pgtype.Timestamptz{}, nil
	}
	return pgtype.Timestamptz{Time: *t.p, Valid: true}, nil
}

// Times is a timestamptz[] parameter.
type Times []time.Time

func (a Times) Dimensions() []pgtype.ArrayDimension { return dims(len(a)) }
func (a Times) Index(i int) any                     { return timestamp{&a[i]} }
func (a Times) IndexType() any                      { return timestamp{} }

// NullTimes is a timestamptz[] parameter whose nil elements are NULL.
type NullTimes []*time.Time

func (a NullTimes) Dimensions() []pgtype.ArrayDimension { return dims(len(a)) }
func (a NullTimes) Index(i int) any                     { return timestamp{a[i]} }
func (a NullTimes) IndexType() any                      { return timestamp{} }

// id is a reference to a uuid element.
type id struct{ p *pgtype.UUID }

func (u id) UUIDValue() (pgtype.UUID, error) { return *u.p, nil }

// UUIDs is a uuid[] parameter; an element that is not Valid is NULL.
type UUIDs []pgtype.UUID

func (a UUIDs) Dimensions() []pgtype.ArrayDimension { return dims(len(a)) }
func (a UUIDs) Index(i int) any                     { return id{&a[i]} }
func (a UUIDs) IndexType() any                      { return id{&pgtype.UUID{}} }

// integer is a reference to an integer element of any width; nil is NULL.
type integer struct{ p *int64 }

func (n integer) Int64Value() (pgtype.Int8, error) {
	if n.p == nil {
		return pgtype.Int8{}, nil
	}
	return pgtype.Int8{Int64: *n.p, Valid: true}, nil
}

// Int64s is an int8[] parameter (or int2[] and int4[]: a value that does
// not fit is an error).
type Int64s []int64

func (a Int64s) Dimensions() []pgtype.ArrayDimension { return dims(len(a)) }
func (a Int64s) Index(i int) any                     { return integer{&a[i]} }
func (a Int64s) IndexType() any                      { return integer{} }

// NullInt64s is Int64s whose nil elements are NULL.
type NullInt64s []*int64

func (a NullInt64s) Dimensions() []pgtype.ArrayDimension { return dims(len(a)) }
func (a NullInt64s) Index(i int) any                     { return integer{a[i]} }
func (a NullInt64s) IndexType() any                      { return integer{} }

// bytes is a reference to a bytea element; nil is NULL.
type bytes struct{ p *[]byte }

func (b bytes) BytesValue() ([]byte, error) { return *b.p, nil }

// Bytes is a bytea[] parameter whose nil elements are NULL.
type Bytes [][]byte

func (a Bytes) Dimensions() []pgtype.ArrayDimension { return dims(len(a)) }
func (a Bytes) Index(i int) any                     { return bytes{&a[i]} }
func (a Bytes) IndexType() any                      { return bytes{&[]byte{}} }

// Register tells m the PostgreSQL array type of each type here, and of
// []uuid.UUID, which the store's reads send: a connection in
// [pgx.QueryExecModeExec] or [pgx.QueryExecModeSimpleProtocol] needs it
// to encode them, since those modes do not ask the server for the
// parameters' types. Call it from the pool's AfterConnect. The default
// mode, which prepares each statement, does not need it.
func Register(m *pgtype.Map) {
	m.RegisterDefaultPgType([]uuid.UUID{}, "_uuid")
	for _, t := range []struct {
		v    any
		name string
	}{
		{Texts{}, "_text"}, {NullTexts{}, "_text"},
		{Times{}, "_timestamptz"}, {NullTimes{}, "_timestamptz"},
		{UUIDs{}, "_uuid"},
		{Int64s{}, "_int8"}, {NullInt64s{}, "_int8"},
		{Bytes{}, "_bytea"},
	} {
		m.RegisterDefaultPgType(t.v, t.name)
	}
}
