package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookgate/hookgate/internal/pgarray"
)

// Ordered delivery (migration 28). forward_keys holds each ordering key's
// last position and head. Only the head's forward is attempted; the
// forward that ends moves the head on and releases the next one's outbox
// row. See docs/forwarding.md, "Ordered delivery".

// OrderedEnd is the end of an ordered forward, its key's head.
type OrderedEnd struct {
	Target, Key string
	Seq         int64
	EventID     uuid.UUID
}

// AdvanceOrderedSQL moves the head of sender $1's target $2's key $3 past
// the forward at position $4, if that still is the key's head. A head that
// moved already moves no further. It is one key's, found by its primary
// key under [IndexScans]: as an UPDATE joined to arrays of keys, PostgreSQL
// read every key of the sender when its statistics said the table was
// small.
const AdvanceOrderedSQL = `UPDATE forward_keys SET head_seq = $4::int8 + 1, blocked_event = NULL, blocked_at = NULL, updated_at = statement_timestamp()
WHERE sender = $1 AND target = $2 AND order_key = $3 AND head_seq = $4::int8`

// ReleaseOrderedSQL clears the lease of the outbox row after the forward
// at position $4 of sender $1's target $2's key $3, if the key's head is
// now that row. Run it as a statement of its own after the head moved, in
// the same transaction: it then sees a row that an ingest committed while
// the move waited for the key's lock. The relay takes the released row.
// Under [IndexScans], it probes the outbox's ordering index and the key's
// primary key.
const ReleaseOrderedSQL = `UPDATE forward_outbox SET leased_until = NULL
WHERE sender = $1 AND target = $2 AND order_key = $3 AND seq = $4::int8 + 1 AND leased_until = 'infinity'
  AND EXISTS (SELECT FROM forward_keys f WHERE f.sender = $1 AND f.target = $2 AND f.order_key = $3 AND f.head_seq = $4::int8 + 1)`

// orderedEndArgs are the arguments of [AdvanceOrderedSQL] and
// [ReleaseOrderedSQL] for the end e of sender's forward.
func orderedEndArgs(sender string, e OrderedEnd) []any {
	return []any{sender, e.Target, e.Key, e.Seq}
}

// HandOffOrderedSQL is [ReleaseOrderedSQL], for the ends $2, $3, $4 (targets,
// keys, positions) of sender $1's forwards, for a process that sends the
// next forwards itself: each released row gets the lease $5 (in
// milliseconds; NULL: the relay's) and, when leased, is returned with its
// event, so that the process attempts it at once. Each row is found by key
// probes and updated by ctid, under [TIDScans], as [OutboxRowsByKey] does;
// OFFSET 0 keeps each probe a subquery of its own, run per element of the
// arrays, which the planner would otherwise turn into a scan of the
// sender's rows.
const HandOffOrderedSQL = `WITH r AS (
  UPDATE forward_outbox o SET handed_off = true, leased_until = statement_timestamp() + (
      SELECT a.lease_ms FROM unnest($2::text[], $3::text[], $5::int8[]) AS a(target, order_key, lease_ms)
      WHERE a.target = o.target AND a.order_key = o.order_key LIMIT 1) * interval '1 millisecond'
  WHERE o.sender = $1 AND o.leased_until = 'infinity' AND o.ctid = ANY(ARRAY(
    SELECT x.ctid FROM unnest($2::text[], $3::text[], $4::int8[]) AS a(target, order_key, seq)
    CROSS JOIN LATERAL (SELECT FROM forward_keys f
      WHERE f.sender = $1 AND f.target = a.target AND f.order_key = a.order_key AND f.head_seq = a.seq + 1 OFFSET 0) f
    CROSS JOIN LATERAL (SELECT x.ctid FROM forward_outbox x
      WHERE x.sender = $1 AND x.target = a.target AND x.order_key = a.order_key AND x.seq = a.seq + 1 OFFSET 0) x))
  RETURNING o.event_id, o.target, o.delivery_id, o.order_key, o.seq, o.leased_until
)
SELECT r.event_id, r.target, r.delivery_id, r.order_key, r.seq, w.headers, w.body, w.event_type
FROM r CROSS JOIN LATERAL (SELECT w.headers, w.body, w.event_type FROM webhook_events w WHERE w.sender = $1 AND w.id = r.event_id OFFSET 0) w
WHERE r.leased_until IS NOT NULL`

// HandedOff is the next forward of an ordered key, released and leased to
// the process that ended the one before it, with its event.
type HandedOff struct {
	Sender, Target, DeliveryID string
	EventID                    uuid.UUID
	OrderKey                   string
	Seq                        int64
	EventType                  string
	Headers                    map[string][]string
	Body                       []byte
}

// ScanHandedOff reads the rows of [HandOffOrderedSQL] of sender.
func ScanHandedOff(sender string, rows pgx.Rows) ([]HandedOff, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (HandedOff, error) {
		h := HandedOff{Sender: sender}
		var typ *string
		err := r.Scan(&h.EventID, &h.Target, &h.DeliveryID, &h.OrderKey, &h.Seq, &h.Headers, &h.Body, &typ)
		if typ != nil {
			h.EventType = *typ
		}
		return h, err
	})
}

// blockOrderedSQL marks forward $5 (target $2, key $3, position $4) of
// sender $1 as the failed head that holds its key.
const blockOrderedSQL = `UPDATE forward_keys SET blocked_event = $5, blocked_at = statement_timestamp(), updated_at = statement_timestamp()
WHERE sender = $1 AND target = $2 AND order_key = $3 AND head_seq = $4`

// OrderedArgs returns the arguments of [AdvanceOrderedSQL] and
// [ReleaseOrderedSQL] for ends, all of sender.
func OrderedArgs(sender string, ends []OrderedEnd) []any {
	targets, keys, seqs := make(pgarray.Texts, len(ends)), make(pgarray.Texts, len(ends)), make(pgarray.Int64s, len(ends))
	for i, e := range ends {
		targets[i], keys[i], seqs[i] = e.Target, e.Key, e.Seq
	}
	return []any{sender, targets, keys, seqs}
}

// AdvanceOrdered ends the ordered forward e of sender: its key's head
// moves past it, and the next forward of the key is released. With a
// positive handOff, the next forward is leased to the caller for that long
// and returned with its event ([HandOffOrderedSQL]); otherwise the relay
// takes it. It is one transaction. moved reports whether e was still the
// head; when it was not, nothing changed.
func (q *Queries) AdvanceOrdered(ctx context.Context, sender string, e OrderedEnd, handOff time.Duration) (moved bool, handed []HandedOff, err error) {
	err = pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		var b pgx.Batch
		b.Queue(IndexScans)
		b.Queue(AdvanceOrderedSQL, orderedEndArgs(sender, e)...)
		br := tx.SendBatch(ctx, &b)
		_, err := br.Exec()
		var tag pgconn.CommandTag
		if err == nil {
			tag, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if moved = tag.RowsAffected() > 0; !moved {
			return nil
		}
		if handOff <= 0 {
			_, err = tx.Exec(ctx, ReleaseOrderedSQL, orderedEndArgs(sender, e)...)
			return err
		}
		if _, err := tx.Exec(ctx, TIDScans); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, HandOffOrderedSQL, append(OrderedArgs(sender, []OrderedEnd{e}), []int64{handOff.Milliseconds()})...)
		if err != nil {
			return err
		}
		handed, err = ScanHandedOff(sender, rows)
		return err
	})
	if err != nil {
		return false, nil, fmt.Errorf("end ordered forward %s to %s: %w", e.EventID, e.Target, err)
	}
	return moved, handed, nil
}

// BlockOrdered records that e, its key's head, failed for good and holds
// its key until an operator redelivers or skips it. It does nothing when e
// is no longer the head.
func (q *Queries) BlockOrdered(ctx context.Context, sender string, e OrderedEnd) error {
	if _, err := q.db.Exec(ctx, blockOrderedSQL, sender, e.Target, e.Key, e.Seq, pgtype.UUID{Bytes: e.EventID, Valid: true}); err != nil {
		return fmt.Errorf("block ordered key of %s to %s: %w", e.EventID, e.Target, err)
	}
	return nil
}

// OrderedTurn is where an ordered forward stands in its key.
type OrderedTurn int

// The turns of an ordered forward.
const (
	// TurnNow: it is the key's head, and may be attempted.
	TurnNow OrderedTurn = iota
	// TurnPast: the key's head has moved past it (it ended, or was
	// skipped): there is nothing left to do.
	TurnPast
	// TurnLater: a forward before it has not ended.
	TurnLater
	// TurnBlocked: it failed for good and holds its key: only a
	// redelivery, which clears the block, attempts it again.
	TurnBlocked
)

// OrderedTurnOf tells whether the forward at position seq of sender's
// (target, key) is the key's head, and whether that head holds the key,
// blocked. A key without a row (deleted when idle)
// has nothing left to do.
func (q *Queries) OrderedTurnOf(ctx context.Context, sender, target, key string, seq int64) (OrderedTurn, error) {
	var (
		head    int64
		blocked bool
	)
	err := q.db.QueryRow(ctx, `SELECT head_seq, blocked_event IS NOT NULL FROM forward_keys WHERE sender = $1 AND target = $2 AND order_key = $3`,
		sender, target, key).Scan(&head, &blocked)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return TurnPast, nil
	case err != nil:
		return TurnLater, fmt.Errorf("read ordering key of %s: %w", target, err)
	case head == seq && blocked:
		return TurnBlocked, nil
	case head == seq:
		return TurnNow, nil
	case head > seq:
		return TurnPast, nil
	}
	return TurnLater, nil
}

// OrderedHeadsSQL selects which of sender $1's outbox rows $2 (events), $3
// (targets) are their key's head with the lease their ingest gave them:
// those the fast path may attempt. A row behind its head waits with
// 'infinity'; one handed off since to the process that ended the forward
// before it is that process's. OFFSET 0 keeps each row's probe of the
// primary key a subquery of its own: as a join, PostgreSQL read every
// outbox row of the sender when its statistics were wrong.
const OrderedHeadsSQL = `SELECT x.event_id, x.target, x.seq FROM unnest($2::uuid[], $3::text[]) AS k(event_id, target)
CROSS JOIN LATERAL (SELECT x.event_id, x.target, x.seq FROM forward_outbox x
  WHERE x.sender = $1 AND x.event_id = k.event_id AND x.target = k.target
    AND x.leased_until IS NOT NULL AND x.leased_until < 'infinity' AND x.handed_off IS NOT TRUE AND x.recorded_at IS NULL OFFSET 0) x`

// OrderedHeads returns which of sender's ordered outbox rows (events[i],
// targets[i]) are leased heads, with their positions, in one round trip.
func (q *Queries) OrderedHeads(ctx context.Context, sender string, events []uuid.UUID, targets []string) (map[ForwardRef]int64, error) {
	ids := make([]pgtype.UUID, len(events))
	for i, e := range events {
		ids[i] = pgtype.UUID{Bytes: e, Valid: true}
	}
	var b pgx.Batch
	b.Queue(OutboxIndexScans)
	b.Queue(OrderedHeadsSQL, sender, ids, targets)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("read ordered heads: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("read ordered heads: %w", err)
	}
	out := map[ForwardRef]int64{}
	for rows.Next() {
		var (
			r   ForwardRef
			seq int64
		)
		if err := rows.Scan(&r.EventID, &r.Target, &seq); err != nil {
			return nil, fmt.Errorf("read ordered heads: %w", err)
		}
		out[r] = seq
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ordered heads: %w", err)
	}
	return out, nil
}

// ForwardRef names a forward: its event and target.
type ForwardRef struct {
	EventID uuid.UUID
	Target  string
}

// BlockedKey is an ordering key held by a forward that failed.
type BlockedKey struct {
	Key       string
	EventID   uuid.UUID
	Seq       int64
	BlockedAt time.Time
	// Waiting is how many forwards of the key wait behind it.
	Waiting int64
}

// Summary is how a blocked key is shown: "blocked by <event> (N
// waiting)".
func (k BlockedKey) Summary() string {
	return fmt.Sprintf("blocked by %s (%d waiting)", k.EventID, k.Waiting)
}

// BlockedKeys returns up to limit of sender's target's blocked keys,
// oldest block first.
func (q *Queries) BlockedKeys(ctx context.Context, sender, target string, limit int) ([]BlockedKey, error) {
	rows, err := q.db.Query(ctx, `SELECT order_key, blocked_event, head_seq, blocked_at, last_seq - head_seq
FROM forward_keys WHERE sender = $1 AND target = $2 AND blocked_event IS NOT NULL
ORDER BY blocked_at, order_key LIMIT $3`, sender, target, limit)
	if err != nil {
		return nil, fmt.Errorf("list blocked keys of %s: %w", target, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (BlockedKey, error) {
		var k BlockedKey
		return k, r.Scan(&k.Key, &k.EventID, &k.Seq, &k.BlockedAt, &k.Waiting)
	})
	if err != nil {
		return nil, fmt.Errorf("list blocked keys of %s: %w", target, err)
	}
	return out, nil
}

// BlockedBy returns the key that the forward of eventID to target blocks,
// if it does.
func (q *Queries) BlockedBy(ctx context.Context, sender, target string, eventID uuid.UUID) (BlockedKey, bool, error) {
	var k BlockedKey
	err := q.db.QueryRow(ctx, `SELECT order_key, blocked_event, head_seq, blocked_at, last_seq - head_seq
FROM forward_keys WHERE sender = $1 AND target = $2 AND blocked_event = $3`, sender, target, pgtype.UUID{Bytes: eventID, Valid: true}).
		Scan(&k.Key, &k.EventID, &k.Seq, &k.BlockedAt, &k.Waiting)
	if errors.Is(err, pgx.ErrNoRows) {
		return BlockedKey{}, false, nil
	}
	if err != nil {
		return BlockedKey{}, false, fmt.Errorf("read the key %s blocks: %w", eventID, err)
	}
	return k, true, nil
}

// ErrNotBlocked is returned by [Queries.SkipBlocked] for a forward that
// holds no key.
var ErrNotBlocked = errors.New("the forward does not block its ordering key")

// SkipBlocked skips the failed forward of eventID to target that blocks
// its key: the key's head moves past it, and the next forward is released.
// It returns the key, or ErrNotBlocked. The forward stays failed.
func (q *Queries) SkipBlocked(ctx context.Context, sender, target string, eventID uuid.UUID) (BlockedKey, error) {
	var k BlockedKey
	err := pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE forward_keys SET head_seq = head_seq + 1, blocked_event = NULL, blocked_at = NULL, updated_at = statement_timestamp()
WHERE sender = $1 AND target = $2 AND blocked_event = $3
RETURNING order_key, head_seq - 1, last_seq - head_seq + 1`, sender, target, pgtype.UUID{Bytes: eventID, Valid: true}).Scan(&k.Key, &k.Seq, &k.Waiting)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotBlocked
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, IndexScans); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, ReleaseOrderedSQL, orderedEndArgs(sender, OrderedEnd{Target: target, Key: k.Key, Seq: k.Seq})...)
		return err
	})
	if errors.Is(err, ErrNotBlocked) {
		return BlockedKey{}, err
	}
	if err != nil {
		return BlockedKey{}, fmt.Errorf("skip forward %s to %s: %w", eventID, target, err)
	}
	k.EventID = eventID
	return k, nil
}

// sortKeysSQL returns every pair of a target of $1 and a key of $2, in the
// order in which every writer of forward_keys locks keys: (target, key), in
// the database's collation.
const sortKeysSQL = `SELECT t, k FROM unnest($1::text[]) AS t, unnest($2::text[]) AS k ORDER BY t, k`

// LockKeySQL locks the row of sender $1's target $2's key $3, if any: a
// probe of the primary key, under [IndexOrderScans].
const LockKeySQL = `SELECT FROM forward_keys WHERE sender = $1 AND target = $2 AND order_key = $3 FOR NO KEY UPDATE`

// LockKeysInOrderSQL locks the rows of sender $1's keys that the pairs of
// $2 (targets) and $3 (keys) name, those that exist, in the order of every
// other writer of forward_keys: (target, key), in the database's
// collation. The pairs are sorted in a subquery, which PostgreSQL does not
// pull up, and each is locked by a probe of the primary key in a LATERAL
// subquery of its own, run per pair in that order. Run it under
// [IndexScans]. The fast path's recording sends it first, in the same
// round trip: its statements then write the keys in any order, by ctid.
const LockKeysInOrderSQL = `SELECT count(*) FROM (SELECT a.target, a.order_key FROM unnest($2::text[], $3::text[]) AS a(target, order_key) ORDER BY a.target, a.order_key) a
CROSS JOIN LATERAL (SELECT FROM forward_keys f WHERE f.sender = $1 AND f.target = a.target AND f.order_key = a.order_key FOR NO KEY UPDATE) f`

// LockOrderKeys locks, until the transaction ends, the rows of sender's
// keys that targets name with keys (every pair; those with no row are
// skipped). It locks them in the order of every other writer of
// forward_keys, (target, key): the ingest's upsert of its keys and a
// recording's advance. A transaction that then writes the keys one by one,
// in another order (a redelivery), no longer waits for one while holding
// another that a writer in key order waits for, which PostgreSQL would end
// as a deadlock.
//
// It takes two round trips: the database sorts the pairs, in its
// collation, and then each is locked by a probe of its own, in that order.
// As one statement ordered by the primary key, PostgreSQL read every key
// of the target when its statistics said the table was small.
func (q *Queries) LockOrderKeys(ctx context.Context, sender string, targets, keys []string) error {
	if len(targets) == 0 || len(keys) == 0 {
		return nil
	}
	rows, err := q.db.Query(ctx, sortKeysSQL, targets, keys) //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		return fmt.Errorf("lock the ordering keys of %s: %w", sender, err)
	}
	var b pgx.Batch
	b.Queue(IndexOrderScans)
	var t, k string
	_, err = pgx.ForEachRow(rows, []any{&t, &k}, func() error {
		b.Queue(LockKeySQL, sender, t, k)
		return nil
	})
	if err != nil {
		return fmt.Errorf("lock the ordering keys of %s: %w", sender, err)
	}
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("lock the ordering keys of %s: %w", sender, err)
	}
	return nil
}

// UnblockSQL clears the block of sender $1's target $2 held by event $3,
// for a redelivery that retries it in place. It returns the key and the
// position.
const UnblockSQL = `UPDATE forward_keys SET blocked_event = NULL, blocked_at = NULL, updated_at = statement_timestamp()
WHERE sender = $1 AND target = $2 AND blocked_event = $3 RETURNING order_key, head_seq`

// The statements of [Queries.AppendOrdered], each routed to the sender's
// shard on Citus. As one statement (a data-modifying CTE under an INSERT …
// SELECT) Citus sent the key's row to every worker, and committed in two
// phases.
const (
	// appendQueuedSQL tells whether the forward of event $2 to sender $1's
	// target $3 has an outbox row.
	appendQueuedSQL = `SELECT EXISTS (SELECT FROM forward_outbox WHERE sender = $1 AND event_id = $2 AND target = $3)`
	// appendKeySQL takes the next position of sender $1's target $2's key
	// $3, and returns it with the key's head.
	appendKeySQL = `INSERT INTO forward_keys AS f (sender, target, order_key, last_seq, head_seq, updated_at)
VALUES ($1, $2, $3, 1, 1, statement_timestamp())
ON CONFLICT (sender, target, order_key) DO UPDATE SET last_seq = f.last_seq + 1, updated_at = excluded.updated_at
RETURNING f.last_seq, f.head_seq`
	// appendOrderedSQL writes the outbox row of event $4 (delivery $5) at
	// position $6 of the key whose head is $7.
	appendOrderedSQL = `INSERT INTO forward_outbox (sender, event_id, target, delivery_id, created_at, leased_until, order_key, seq)
VALUES ($1, $4, $2, $5, statement_timestamp(), CASE WHEN $6::int8 = $7::int8 THEN NULL ELSE 'infinity'::timestamptz END, $3, $6)`
)

// AppendOrdered appends a forward of eventID (deliveryID) to sender's
// target at the end of key's queue: the next position, with the relay's
// lease when it is the head and 'infinity' otherwise. It returns how many
// of the key's forwards come before it. A forward that has an outbox row
// already (waiting, or appended before) is not appended again: the key
// takes no position for it, and AppendOrdered returns [pgx.ErrNoRows].
// Run it in a transaction: the key's row stays locked until COMMIT.
func (q *Queries) AppendOrdered(ctx context.Context, sender, target, key string, eventID uuid.UUID, deliveryID string) (int64, error) {
	id := pgtype.UUID{Bytes: eventID, Valid: true}
	var (
		queued     bool
		last, head int64
	)
	if err := q.db.QueryRow(ctx, appendQueuedSQL, sender, id, target).Scan(&queued); err != nil {
		return 0, err
	}
	if queued {
		return 0, pgx.ErrNoRows
	}
	if err := q.db.QueryRow(ctx, appendKeySQL, sender, target, key).Scan(&last, &head); err != nil {
		return 0, err
	}
	if _, err := q.db.Exec(ctx, appendOrderedSQL, sender, target, key, id, deliveryID, last, head); err != nil {
		return 0, err
	}
	return last - head, nil
}

// DeleteIdleKeysSQL deletes up to $3 of sender $1's ordering keys with
// nothing waiting, not blocked, and unchanged since $2. A key that an
// ingest takes again meanwhile is not deleted: its row has changed.
const DeleteIdleKeysSQL = `DELETE FROM forward_keys WHERE sender = $1 AND head_seq > last_seq AND blocked_event IS NULL
  AND ctid = ANY(ARRAY(SELECT ctid FROM forward_keys
    WHERE sender = $1 AND head_seq > last_seq AND blocked_event IS NULL AND updated_at < $2 LIMIT $3))`

// DeleteIdleKeys deletes up to limit of sender's ordering keys idle since
// before cutoff ([DeleteIdleKeysSQL]). A key that comes back starts again
// at position 1. It returns how many it deleted.
func (q *Queries) DeleteIdleKeys(ctx context.Context, sender string, cutoff time.Time, limit int) (int64, error) {
	tag, err := q.db.Exec(ctx, DeleteIdleKeysSQL, sender, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("delete idle ordering keys of %s: %w", sender, err)
	}
	return tag.RowsAffected(), nil
}
