package dedup

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// encoder encodes the parameters of the pipeline's statements in binary
// format without pgx's general machinery for the types the ingest path
// sends (text, bytea, uuid, int2, timestamptz, jsonb as encoded JSON): the
// profile of make bench showed pgx's encoding at a tenth of the gateway's
// CPU. Any other type, or a type that does not match the statement's
// parameter, falls back to pgx (ok false).
type encoder struct {
	buf     []byte
	values  [][]byte
	formats []int16
	offsets []int
}

// encode fills e.values with args encoded for sd; it returns false when it
// cannot encode one of them.
func (e *encoder) encode(sd *pgconn.StatementDescription, args []any) bool {
	if len(args) != len(sd.ParamOIDs) {
		return false
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
		switch v := a.(type) {
		case string:
			if oid != pgtype.TextOID && oid != pgtype.VarcharOID {
				return false
			}
			e.buf = append(e.buf, v...)
		case []byte:
			switch oid {
			case pgtype.ByteaOID:
				e.buf = append(e.buf, v...)
			case pgtype.JSONBOID: // encoded JSON
				e.buf = append(append(e.buf, 1), v...)
			default:
				return false
			}
		case [16]byte:
			if oid != pgtype.UUIDOID {
				return false
			}
			e.buf = append(e.buf, v[:]...)
		case int16:
			if oid != pgtype.Int2OID {
				return false
			}
			e.buf = binary.BigEndian.AppendUint16(e.buf, uint16(v))
		case time.Time:
			if oid != pgtype.TimestamptzOID {
				return false
			}
			e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(v.Sub(pgEpoch)/time.Microsecond))
		default:
			return false
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
	return true
}
