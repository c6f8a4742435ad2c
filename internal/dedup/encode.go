package dedup

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// encoder encodes the parameters of the pipeline's statements in binary
// format without pgx's general machinery for the types the ingest path
// sends (text, bytea, uuid, int2, int8, bool, timestamptz, jsonb as encoded
// JSON, and one-dimensional arrays of them for the multi-row statements):
// the profile of make bench showed pgx's encoding at a tenth of the
// gateway's CPU. A scalar of any other type, or one that does not match the
// statement's parameter, falls back to pgx (ok false); a column (a
// multi-row statement's array) has no fallback: it is an error.
type encoder struct {
	buf     []byte
	values  [][]byte
	formats []int16
	offsets []int
}

// arrayElem maps the array types a column may be sent as to their element
// types.
var arrayElem = map[uint32]uint32{
	pgtype.TextArrayOID:        pgtype.TextOID,
	pgtype.VarcharArrayOID:     pgtype.VarcharOID,
	pgtype.ByteaArrayOID:       pgtype.ByteaOID,
	pgtype.UUIDArrayOID:        pgtype.UUIDOID,
	pgtype.Int2ArrayOID:        pgtype.Int2OID,
	pgtype.Int8ArrayOID:        pgtype.Int8OID,
	pgtype.BoolArrayOID:        pgtype.BoolOID,
	pgtype.TimestamptzArrayOID: pgtype.TimestamptzOID,
	pgtype.JSONBArrayOID:       pgtype.JSONBOID,
}

// encode fills e.values with args encoded for sd; ok is false when it
// cannot encode one of the scalars (pgx can), and err is set when it cannot
// encode a column.
func (e *encoder) encode(sd *pgconn.StatementDescription, args []any) (ok bool, err error) {
	if len(args) != len(sd.ParamOIDs) {
		return false, nil
	}
	// The values of the previous statement were copied into the
	// connection's write buffer when it was queued: reuse the space.
	if e.buf == nil {
		e.buf = make([]byte, 0, 4096) // never nil: an empty value is not NULL
	}
	e.buf = e.buf[:0]
	e.offsets = e.offsets[:0]
	for i, a := range args {
		e.offsets = append(e.offsets, len(e.buf))
		oid := sd.ParamOIDs[i]
		if col, isCol := a.(column); isCol {
			if e.buf, err = appendArray(e.buf, oid, col); err != nil {
				return false, fmt.Errorf("parameter $%d: %w", i+1, err)
			}
			continue
		}
		var ok bool
		if e.buf, ok = appendScalar(e.buf, oid, a); !ok {
			return false, nil
		}
	}
	e.values = e.values[:0]
	for i, off := range e.offsets {
		end := len(e.buf)
		if i+1 < len(e.offsets) {
			end = e.offsets[i+1]
		}
		e.values = append(e.values, e.buf[off:end:end])
	}
	if len(e.formats) < len(args) {
		e.formats = make([]int16, len(args))
		for i := range e.formats {
			e.formats[i] = 1
		}
	}
	return true, nil
}

// appendScalar appends v in the binary format of type oid; ok is false when
// v's Go type does not match oid or is not one encode knows.
func appendScalar(buf []byte, oid uint32, v any) (_ []byte, ok bool) {
	switch v := v.(type) {
	case string:
		if oid != pgtype.TextOID && oid != pgtype.VarcharOID {
			return buf, false
		}
		return append(buf, v...), true
	case []byte:
		switch oid {
		case pgtype.ByteaOID:
			return append(buf, v...), true
		case pgtype.JSONBOID: // encoded JSON
			return append(append(buf, 1), v...), true
		}
	case [16]byte:
		if oid == pgtype.UUIDOID {
			return append(buf, v[:]...), true
		}
	case int16:
		if oid == pgtype.Int2OID {
			return binary.BigEndian.AppendUint16(buf, uint16(v)), true
		}
	case int64:
		if oid == pgtype.Int8OID {
			return binary.BigEndian.AppendUint64(buf, uint64(v)), true
		}
	case bool:
		if oid == pgtype.BoolOID {
			if v {
				return append(buf, 1), true
			}
			return append(buf, 0), true
		}
	case time.Time:
		if oid == pgtype.TimestamptzOID {
			return binary.BigEndian.AppendUint64(buf, uint64(v.Sub(pgEpoch)/time.Microsecond)), true
		}
	}
	return buf, false
}

// appendArray appends col as a one-dimensional array of type oid (binary
// format: dimensions, null flag, element type, length, lower bound 1, then
// each element's length and bytes; -1 for NULL).
func appendArray(buf []byte, oid uint32, col column) ([]byte, error) {
	elem, ok := arrayElem[oid]
	if !ok {
		return buf, fmt.Errorf("a column sent as type %d, which is not an array type rows support", oid)
	}
	hasNull := uint32(0)
	for _, v := range col {
		if v == nil {
			hasNull = 1
			break
		}
	}
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = binary.BigEndian.AppendUint32(buf, hasNull)
	buf = binary.BigEndian.AppendUint32(buf, elem)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(col)))
	buf = binary.BigEndian.AppendUint32(buf, 1)
	for j, v := range col {
		if v == nil {
			buf = binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF)
			continue
		}
		at := len(buf)
		buf = append(buf, 0, 0, 0, 0)
		if buf, ok = appendScalar(buf, elem, v); !ok {
			return buf, fmt.Errorf("row %d: a %T cannot be sent as element type %d", j+1, v, elem)
		}
		binary.BigEndian.PutUint32(buf[at:], uint32(len(buf)-at-4))
	}
	return buf, nil
}
