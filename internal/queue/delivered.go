package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/hookgate/hookgate/internal/pgarray"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river/rivertype"
)

// FirstAttempt is the outcome of a fast-path first attempt, to record with
// [Jobs.RecordFirstAttempts]. A delivered forward becomes a row of
// forward_delivered, and any other a River job.
type FirstAttempt struct {
	Sender  string
	EventID uuid.UUID
	Target  string
	// Release reports that the forward was not attempted. Its outbox
	// row's lease is cleared for the relay, no job is inserted, and the
	// fields below are unused.
	Release bool
	// State is the forward's state after the attempt. A retrying forward
	// has its retry in ScheduledAt. A failed one has FinalizedAt set. It
	// failed at once when FailedAtOnce, or else used up its attempts.
	State        State
	FailedAtOnce bool
	MaxAttempts  int
	AttemptedAt  time.Time
	FinalizedAt  *time.Time
	ScheduledAt  time.Time
	// Error is the attempt's error text, "" when delivered. Output is the
	// attempt's recorded output when its Status is not 0.
	Error  string
	Output Output
	// Answer is the attempt with the target's answer, recorded in
	// forward_attempts in the same transaction, when its Outcome is set.
	Answer store.Attempt
	// OrderKey and Seq are an ordered forward's key and position, "" and
	// 0 for another. A delivered ordered forward moves its key's head on
	// and releases the next forward. A failed one does too when OnFailure
	// is "skip", and holds its key when it is "hold".
	OrderKey  string
	Seq       int64
	OnFailure string
	// Mark, when set on a batch's first outcome, is the mark of the
	// recording's split form (on Citus) instead of the time of the call.
	// A batch tried again keeps its mark, so that a try whose first
	// transaction committed and whose second failed has its rows deleted
	// by the next try, not taken again by the relay after the grace.
	Mark time.Time
	// HandOff, when positive, leases the next forward of the key that its
	// end releases to the recording process for this long: the recording
	// returns it with its event ([store.HandedOff]), to attempt at once.
	// Zero leaves it to the relay.
	HandOff time.Duration
	// New reports that the forward's event was created by the ingest
	// whose process attempted it, with its outbox row. No failed forward
	// of that event to that target can be older than the attempt, so the
	// recording marks none superseded: it saves the look for them (two
	// statements and a probe of river_job per forward). A hand-off of an
	// ordered key's next forward is not New: it may be a redelivery.
	New bool
}

// The fast path's recording takes each attempted forward's outbox row in
// one of two ways, and writes its record from what it took:
//
//   - On PostgreSQL it deletes the row. The record and the delete are one
//     atomic statement.
//   - On Citus it marks the row recorded. The row lives on the sender's
//     worker and the record on the coordinator, with no two-phase commit.
//     A coordinator that died between the two commits would otherwise
//     lose the record. The marked row stays until a second transaction
//     deletes it after the record's COMMIT. After a crash in between, the
//     relay inserts its job again, so the forward may be repeated with its
//     Idempotency-Key, but never lost.
//
// Either way, a row that a recording already marked is not taken again.

// recordTake returns the CTE d of the recording statements. It deletes
// sender $1's outbox rows whose keys are the pairs of $2 and $3, or marks
// them recorded when mark is not "". It returns their event, target,
// delivery and creation time.
func recordTake(mark string) string {
	take := "DELETE FROM forward_outbox f"
	if mark != "" {
		take = "UPDATE forward_outbox f SET recorded_at = " + mark + "::timestamptz"
	}
	return `d AS (
  ` + take + `
  WHERE f.sender = $1 AND f.ctid = ANY(` + store.OutboxRowsByKey + `) AND f.recorded_at IS NULL
  RETURNING f.event_id, f.target, f.delivery_id, f.created_at, f.order_key, f.seq
)`
}

// jobArgsSQL is the JSON arguments of the job of outbox row d: Args, with
// its ordering key and position when it has them.
const jobArgsSQL = `jsonb_build_object('sender', $1::text, 'event_id', d.event_id, 'target', d.target, 'delivery_id', d.delivery_id)
         || CASE WHEN d.order_key IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('order_key', d.order_key, 'seq', d.seq) END`

// advanceTaken is the CTEs w and adv of a recording statement: for each
// ordered outbox row d that the statement took, with onFailure its
// o.on_failure (or 'skip' for a delivered forward), adv moves its key's
// head past it when onFailure is 'skip', and marks the key blocked by it
// when it is 'hold'. A row the relay took meanwhile is not in d, and its
// key's head stays for the relay's job. [store.ReleaseOrderedSQL] then
// releases the next rows, in a statement of its own. The recording has
// locked the keys before ([store.LockKeysInOrderSQL]), in the order of
// every other writer of forward_keys, so that two transactions never wait
// for each other's keys in a cycle, whatever order adv takes them in. w is
// materialized, and computes blocked_at: Citus refuses a function that is
// not immutable in a CASE of an UPDATE of a distributed table.
//
// In the deleting form (mark ""), w finds each key by a probe of its
// primary key, and adv updates it by ctid, under [store.TIDScans]. Joined
// by its columns, PostgreSQL read every key of the sender when its
// statistics said the table was small. A row updated by ctid is skipped
// when another transaction changed it after the statement began: the lock
// taken before is what keeps the keys unchanged. Citus refuses a ctid in
// a modification that it plans in parts, as it does this one (River's
// table and forward_delivered are the coordinator's), so the split form
// joins by columns.
func advanceTaken(onFailure, mark string) string {
	probe, join := "", "f.sender = $1"
	if mark == "" {
		probe, join = `, k.ctid AS key_ctid
  FROM d JOIN o ON o.event_id = d.event_id AND o.target = d.target
  CROSS JOIN LATERAL (SELECT k.ctid FROM forward_keys k WHERE k.sender = $1 AND k.target = d.target AND k.order_key = d.order_key OFFSET 0) k`,
			"f.ctid = w.key_ctid AND f.sender = $1"
	} else {
		probe = `
  FROM d JOIN o ON o.event_id = d.event_id AND o.target = d.target`
	}
	return `w AS MATERIALIZED (
  SELECT d.event_id, d.target, d.order_key, d.seq, ` + onFailure + ` AS on_failure,
    CASE WHEN ` + onFailure + ` = 'skip' THEN NULL ELSE statement_timestamp() END AS blocked_at` + probe + `
  WHERE d.order_key IS NOT NULL AND ` + onFailure + ` IN ('skip', 'hold')
), adv AS (
  UPDATE forward_keys f SET head_seq = CASE WHEN w.on_failure = 'skip' THEN w.seq + 1 ELSE f.head_seq END,
    blocked_event = CASE WHEN w.on_failure = 'skip' THEN NULL ELSE w.event_id END,
    blocked_at = w.blocked_at,
    updated_at = statement_timestamp()
  FROM w
  WHERE ` + join + ` AND f.target = w.target AND f.order_key = w.order_key AND f.head_seq = w.seq
)`
}

// recordFirst returns the statement that records sender $1's finished
// fast-path forwards that were not delivered. For each outbox row it
// takes, it inserts the forward's job as River's worker would have left it
// after the first attempt. A row that the relay took meanwhile is not
// taken, and gets no second job. The job needs no unique key, because its
// outbox row is taken in the same statement.
//
// Each outbox row is found by a key probe and taken by ctid, under
// [store.TIDScans], never by a scan of the sender's rows. d reads the
// arrays, not o, because Citus refuses a ctid in a modification that reads
// an intermediate result. A row updated since the snapshot is not taken.
// Only the fast path's release updates outbox rows, and never those of an
// attempted forward.
func recordFirst(mark string) string {
	return jobSQL(`WITH o AS (
  SELECT * FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int[], $6::timestamptz[], $7::timestamptz[], $8::timestamptz[], $9::jsonb[], $10::jsonb[], $12::text[])
    AS o(event_id, target, state, max_attempts, attempted_at, finalized_at, scheduled_at, error, metadata, on_failure)
), ` + recordTake(mark) + `, ` + advanceTaken("o.on_failure", mark) + `
INSERT INTO river_job (args, attempt, attempted_at, created_at, errors, finalized_at, kind, max_attempts, metadata, priority, queue, state, scheduled_at, tags)
SELECT ` + jobArgsSQL + `,
       1, o.attempted_at, d.created_at, CASE WHEN o.error IS NULL THEN NULL ELSE ARRAY[o.error] END, o.finalized_at,
       {forward_kind}, o.max_attempts, o.metadata, 1, $11::text, o.state::river_job_state, o.scheduled_at, '{}'
FROM d JOIN o ON o.event_id = d.event_id AND o.target = d.target`)
}

// recordDelivered returns the statement that records sender $1's
// delivered fast-path forwards. It works like recordFirst, but writes one
// forward_delivered row for each outbox row it took.
//
// The deleting form (mark "") also keeps each forward's attempt in its
// forward_delivered row: how long it took ($9) and the target's answer
// ($10, $11), NULL for an outcome without its attempt. An attempt whose
// outbox row it did not take (the relay took it when its lease ended)
// goes to forward_attempts instead, unless a forward_delivered row holds
// it already: a recording tried again after a COMMIT whose outcome was
// unknown writes it once. u holds those attempts, usually none; a row
// holding one is looked for by a probe of its key, for each of them alone
// (under [store.TIDScans], an anti-join read the whole table). The split
// form (Citus) writes no attempt: the attempts go to forward_attempts in a
// statement of their own.
func recordDelivered(mark string) string {
	// The attempt's columns and arrays, and the CTEs that write an untaken
	// attempt, in the deleting form only.
	var attemptArrays, attemptCols, attemptVals, untaken string
	if mark == "" {
		attemptArrays = `, $9::int8[], $10::jsonb[], $11::bytea[]`
		attemptCols, attemptVals = `, took_us, headers, body`, `, o.took_us, o.headers, o.body`
		untaken = `, u AS MATERIALIZED (
  SELECT o.* FROM o
  WHERE o.took_us IS NOT NULL AND NOT EXISTS (SELECT 1 FROM d WHERE d.event_id = o.event_id AND d.target = o.target)
), untaken AS (
  INSERT INTO forward_attempts (` + store.AttemptColumns + `)
  SELECT $1::text, u.event_id, u.target, u.attempted_at, u.took_us, 'delivered', 'first', 1, NULL, NULL, nullif(u.status, 0), u.ack, NULL, u.headers, u.body
  FROM u
  LEFT JOIN LATERAL (SELECT true AS held FROM forward_delivered x
    WHERE x.sender = $1 AND x.event_id = u.event_id::text AND x.target >= u.target AND x.target <= u.target
      AND x.attempted_at = u.attempted_at AND x.took_us IS NOT NULL
    ORDER BY x.target LIMIT 1) h ON true
  WHERE h.held IS NULL
  ON CONFLICT ON CONSTRAINT forward_attempts_pkey DO NOTHING
)`
	}
	return `WITH o AS (
  SELECT * FROM unnest($2::uuid[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::int2[], $7::int2[], $8::text[]` + attemptArrays + `)
    AS o(event_id, target, attempted_at, delivered_at, status, max_attempts, ack` + attemptCols + `)
), ` + recordTake(mark) + `, ` + advanceTaken("'skip'", mark) + untaken + `
INSERT INTO forward_delivered (sender, event_id, target, delivery_id, created_at, attempted_at, delivered_at, status, max_attempts, ack` + attemptCols + `)
SELECT $1::text, d.event_id::text, d.target, d.delivery_id, d.created_at, o.attempted_at, o.delivered_at, o.status, o.max_attempts, o.ack` + attemptVals + `
FROM d JOIN o ON o.event_id = d.event_id AND o.target = d.target`
}

// The recording statements. The first pair deletes the outbox rows. The
// second marks them, on Citus, with the mark as the last parameter.
var (
	recordFirstSQL         = recordFirst("")
	recordFirstMarkSQL     = recordFirst("$13")
	recordDeliveredSQL     = recordDelivered("")
	recordDeliveredMarkSQL = recordDelivered("$9")
)

// RecordFirstAttempts records the fast path's outcomes in one round trip.
// Per sender, one statement records the delivered forwards, one the other
// attempted forwards as jobs on queue, and one the released ones. Each
// finds the outbox rows by key probes.
//
// Each sender's statements are a transaction of their own. On Citus a
// sender's outbox rows live on one worker, and a transaction across two
// workers would commit in two phases. On Citus the statements also mark
// the rows instead of deleting them; see [Jobs.Distributed]. A failure
// leaves the earlier senders recorded. Recording them again finds no
// outbox row and does nothing. When q runs on a transaction, everything is
// the caller's transaction.
func (q *Jobs) RecordFirstAttempts(ctx context.Context, queue string, batch []FirstAttempt) error {
	_, err := q.RecordAndHandOff(ctx, queue, batch)
	return err
}

// RecordAndHandOff is [Jobs.RecordFirstAttempts], returning the next
// forwards of ordered keys that the recording released and leased to this
// process ([FirstAttempt.HandOff]), with their events. On an error it
// returns those whose transaction committed (an earlier sender's): they
// are this process's. Those of a transaction that failed, or whose
// COMMIT's outcome is unknown, are not returned; if it committed, they
// wait for their lease to end and go to the relay.
func (q *Jobs) RecordAndHandOff(ctx context.Context, queue string, batch []FirstAttempt) ([]store.HandedOff, error) {
	var mark *time.Time
	if q.split {
		at := time.Now().UTC().Truncate(time.Microsecond)
		if len(batch) > 0 && !batch[0].Mark.IsZero() {
			at = batch[0].Mark.UTC().Truncate(time.Microsecond)
		}
		mark = &at
	}
	groups, err := recordStatements(queue, batch, mark)
	if err != nil {
		return nil, fmt.Errorf("record fast-path forwards: %w", err)
	}
	_, inTx := q.db.(pgx.Tx)
	own := (len(groups) > 1 || q.split) && !inTx
	var b pgx.Batch
	type handOffAt struct {
		at     int // the statement's index in b
		sender string
	}
	var handOffs []handOffAt
	commits := map[int]bool{} // the indexes in b of the COMMITs
	scans := ""               // the planner settings in force ("": unknown)
	for _, g := range groups {
		for j, tx := range g.txs() {
			if own {
				b.Queue("BEGIN")
				scans = ""
			}
			for _, s := range tx {
				if want := cmp.Or(s.scans, store.TIDScans); want != scans {
					b.Queue(want)
					scans = want
				}
				if s.handOff {
					handOffs = append(handOffs, handOffAt{b.Len(), g.sender})
				}
				b.Queue(s.sql, s.args...)
			}
			if j == 0 && len(g.marks) > 0 {
				queueMarks(&b, g.sender, g.marks, false)
				scans = ""
			}
			if own {
				commits[b.Len()] = true
				b.Queue("COMMIT")
			}
		}
	}
	br := q.db.SendBatch(ctx, &b)
	// handed are the hand-offs whose transaction committed; pending those
	// of the transaction under way.
	var handed, pending []store.HandedOff
	for i := range b.Len() {
		if len(handOffs) > 0 && handOffs[0].at == i {
			rows, err := br.Query() //nolint:rowserrcheck // store.ScanHandedOff collects them with pgx.CollectRows, which checks rows.Err
			if err == nil {
				var hs []store.HandedOff
				hs, err = store.ScanHandedOff(handOffs[0].sender, rows)
				pending = append(pending, hs...)
			}
			if err != nil {
				_ = br.Close()
				return handed, fmt.Errorf("record fast-path forwards: %w", err)
			}
			handOffs = handOffs[1:]
			continue
		}
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return handed, fmt.Errorf("record fast-path forwards: %w", err)
		}
		if commits[i] {
			handed, pending = append(handed, pending...), nil
		}
	}
	if err := br.Close(); err != nil {
		return handed, fmt.Errorf("record fast-path forwards: %w", err)
	}
	// One transaction of the batch's, or the caller's: it has committed,
	// or its caller commits it.
	return append(handed, pending...), nil
}

// senderRecording is one sender's statements of a recording. record is
// the transaction that records and releases. remove, in the split form,
// deletes the outbox rows that record marked.
type senderRecording struct {
	record []statement
	remove []statement
	// marks are the forwards that record records. At the end of record's
	// transaction they supersede the failed jobs of their events.
	sender string
	marks  []ForwardKey
}

// txs returns g's transactions in their order.
func (g senderRecording) txs() [][]statement {
	if len(g.remove) == 0 {
		return [][]statement{g.record}
	}
	return [][]statement{g.record, g.remove}
}

// riverSchedulerInterval is how often River's job scheduler makes due jobs
// available. It is River's internal default, which a Client cannot set.
// River's fetch takes only available jobs, so a retryable job due sooner
// than this could wait up to 5s for the scheduler's next run.
const riverSchedulerInterval = 5 * time.Second

// recordedState is the River state of the job that records a first
// attempt's outcome, as River's executor would leave it. Pending becomes
// available. Retrying becomes available when the retry is due within
// River's scheduler interval, and retryable otherwise. Failed becomes
// cancelled when it failed at once, and discarded when its attempts are
// used up. A delivered forward is not a job.
func recordedState(a FirstAttempt, now time.Time) (string, error) {
	switch {
	case a.State == StatePending:
		return jobAvailable, nil
	case a.State == StateRetrying && a.ScheduledAt.Sub(now) <= riverSchedulerInterval:
		return jobAvailable, nil
	case a.State == StateRetrying:
		return string(rivertype.JobStateRetryable), nil
	case a.State == StateFailed && a.FailedAtOnce:
		return string(rivertype.JobStateCancelled), nil
	case a.State == StateFailed:
		return jobDiscarded, nil
	}
	return "", fmt.Errorf("the first attempt of %s/%s to %s left it %q: not a state to record", a.Sender, a.EventID, a.Target, a.State)
}

// recordStatements returns the statements of [Jobs.RecordFirstAttempts]
// for batch, one group per sender. Without mark they delete the outbox
// rows. With mark, the split form, they mark the rows and then delete
// them.
func recordStatements(queue string, batch []FirstAttempt, mark *time.Time) ([]senderRecording, error) {
	now := time.Now()
	// Event IDs go as pgtype.UUID, which pgx encodes in binary. pgx
	// encodes a uuid.UUID through its text, which costs a few percent of
	// the gateway's CPU under forwarding load.
	//
	// The arrays are pgarray's, which pgx encodes without an allocation
	// per element; the jsonb ones stay []*string, which pgx's JSON codec
	// writes as they are.
	type cols struct {
		events, relEvents              pgarray.UUIDs
		targets, relTargets, states    pgarray.Texts
		maxAttempts                    []int32
		attempted, finalized, schedule pgarray.NullTimes
		errs, metas                    []*string
		onFailure                      pgarray.NullTexts
		// The ordered forwards whose end may release the next, and the
		// lease of the next when it is handed off (nil: none).
		ends      []store.OrderedEnd
		handLease pgarray.NullInt64s
		// The attempts with their answers.
		answers []store.Attempt
		// The ordering keys that the statements write.
		keys []orderKey
		// The recorded forwards that are not New, whose recording marks
		// the failed forwards of their events superseded.
		marks []ForwardKey
		// The delivered ones.
		dEvents                pgarray.UUIDs
		dTargets               pgarray.Texts
		dAttempted, dDelivered pgarray.Times
		dStatus, dMaxAttempts  []int16
		dAcks                  pgarray.NullTexts
		// The delivered ones' attempts, in the deleting form: NULL
		// without one.
		dTook    pgarray.NullInt64s
		dHeaders []*string
		dBodies  pgarray.Bytes
	}
	bySender := map[string]*cols{}
	var order []string
	for i := range batch {
		a := &batch[i]
		c := bySender[a.Sender]
		if c == nil {
			c = &cols{}
			bySender[a.Sender] = c
			order = append(order, a.Sender)
		}
		// The deleting form keeps a delivered forward's attempt in its
		// forward_delivered row.
		fold := mark == nil && a.State == StateDelivered && !a.Release
		if !a.Release && a.Answer.Outcome != "" && !fold {
			c.answers = append(c.answers, a.Answer)
		}
		if a.Release {
			c.relEvents = append(c.relEvents, pgtype.UUID{Bytes: a.EventID, Valid: true})
			c.relTargets = append(c.relTargets, a.Target)
			continue
		}
		if !a.New {
			c.marks = append(c.marks, ForwardKey{Target: a.Target, EventID: a.EventID})
		}
		if a.OrderKey != "" && (a.State == StateDelivered || a.State == StateFailed && (a.OnFailure == "skip" || a.OnFailure == "hold")) {
			c.keys = append(c.keys, orderKey{a.Target, a.OrderKey})
		}
		if a.OrderKey != "" && (a.State == StateDelivered || a.State == StateFailed && a.OnFailure == "skip") {
			c.ends = append(c.ends, store.OrderedEnd{Target: a.Target, Key: a.OrderKey, Seq: a.Seq, EventID: a.EventID})
			var lease *int64
			if a.HandOff > 0 {
				ms := a.HandOff.Milliseconds()
				lease = &ms
			}
			c.handLease = append(c.handLease, lease)
		}
		if a.State == StateDelivered {
			at := a.Output.DeliveredAt
			if at.IsZero() && a.FinalizedAt != nil {
				at = *a.FinalizedAt
			}
			c.dEvents = append(c.dEvents, pgtype.UUID{Bytes: a.EventID, Valid: true})
			c.dTargets = append(c.dTargets, a.Target)
			c.dAttempted = append(c.dAttempted, a.AttemptedAt)
			c.dDelivered = append(c.dDelivered, at)
			c.dStatus = append(c.dStatus, int16(a.Output.Status))
			c.dMaxAttempts = append(c.dMaxAttempts, int16(min(a.MaxAttempts, math.MaxInt16)))
			var ack *string
			if a.Output.Ack != "" {
				ack = &a.Output.Ack
			}
			c.dAcks = append(c.dAcks, ack)
			if fold {
				var took *int64
				var hdrs *string
				var body []byte
				if a.Answer.Outcome != "" {
					t, h, err := store.AnswerColumns(a.Answer)
					if err != nil {
						return nil, err
					}
					took, hdrs, body = &t, h, a.Answer.Body
				}
				c.dTook, c.dHeaders, c.dBodies = append(c.dTook, took), append(c.dHeaders, hdrs), append(c.dBodies, body)
			}
			continue
		}
		state, err := recordedState(*a, now)
		if err != nil {
			return nil, err
		}
		var errJSON *string
		if a.Error != "" {
			b, err := json.Marshal(rivertype.AttemptError{At: a.AttemptedAt, Attempt: 1, Error: a.Error})
			if err != nil {
				return nil, err
			}
			s := string(b)
			errJSON = &s
		}
		meta := "{}"
		if a.Output.Status != 0 {
			out := a.Output
			out.Attempt = 1
			b, err := json.Marshal(map[string]Output{"output": out})
			if err != nil {
				return nil, err
			}
			meta = string(b)
		}
		c.events = append(c.events, pgtype.UUID{Bytes: a.EventID, Valid: true})
		c.targets = append(c.targets, a.Target)
		c.states = append(c.states, state)
		c.maxAttempts = append(c.maxAttempts, int32(a.MaxAttempts))
		c.attempted = append(c.attempted, &a.AttemptedAt)
		c.finalized = append(c.finalized, a.FinalizedAt)
		c.schedule = append(c.schedule, &a.ScheduledAt)
		c.errs = append(c.errs, errJSON)
		c.metas = append(c.metas, &meta)
		var onFailure *string
		if a.OrderKey != "" && a.State == StateFailed && a.OnFailure != "" {
			onFailure = &a.OnFailure
		}
		c.onFailure = append(c.onFailure, onFailure)
	}
	groups := make([]senderRecording, 0, len(order))
	for _, s := range order {
		c := bySender[s]
		var g senderRecording
		if len(c.keys) > 0 {
			// The keys that the statements write, locked first in the
			// order of every other writer (see advanceTaken): the
			// statement of the delivered forwards and that of the
			// others each write some, one after the other.
			targets, names := make(pgarray.Texts, len(c.keys)), make(pgarray.Texts, len(c.keys))
			for i, k := range c.keys {
				targets[i], names[i] = k.target, k.key
			}
			g.record = append(g.record, statement{sql: store.LockKeysInOrderSQL, args: []any{s, targets, names}, scans: store.IndexScans})
		}
		if len(c.dEvents) > 0 {
			if mark == nil {
				g.record = append(g.record, statement{sql: recordDeliveredSQL, args: []any{s, c.dEvents, c.dTargets, c.dAttempted, c.dDelivered, c.dStatus, c.dMaxAttempts, c.dAcks,
					c.dTook, c.dHeaders, c.dBodies}})
			} else {
				g.record = append(g.record, statement{sql: recordDeliveredMarkSQL, args: []any{s, c.dEvents, c.dTargets, c.dAttempted, c.dDelivered, c.dStatus, c.dMaxAttempts, c.dAcks, *mark}})
			}
		}
		if len(c.events) > 0 {
			args := []any{s, c.events, c.targets, c.states, c.maxAttempts, c.attempted, c.finalized, c.schedule, c.errs, c.metas, queue, c.onFailure}
			if mark == nil {
				g.record = append(g.record, statement{sql: recordFirstSQL, args: args})
			} else {
				g.record = append(g.record, statement{sql: recordFirstMarkSQL, args: append(args, *mark)})
			}
		}
		if len(c.ends) > 0 {
			// The next forwards of the keys whose heads moved, in a
			// statement of their own (see store.ReleaseOrderedSQL),
			// leased to this process when handed off.
			g.record = append(g.record, statement{sql: store.HandOffOrderedSQL, args: append(store.OrderedArgs(s, c.ends), c.handLease), handOff: true})
		}
		if len(c.relEvents) > 0 {
			g.record = append(g.record, statement{sql: store.ReleaseOutboxSQL, args: []any{s, c.relEvents, c.relTargets}})
		}
		if len(c.answers) > 0 {
			// The attempts and their answers, in the same transaction.
			args, err := store.AttemptArgs(s, c.answers)
			if err != nil {
				return nil, err
			}
			g.record = append(g.record, statement{sql: store.InsertAttemptsSQL, args: args})
		}
		if mark != nil && len(c.dEvents)+len(c.events) > 0 {
			events := append(append(pgarray.UUIDs(nil), c.dEvents...), c.events...)
			targets := append(append(pgarray.Texts(nil), c.dTargets...), c.targets...)
			g.remove = []statement{{sql: store.DeleteRecordedSQL, args: []any{s, events, targets, *mark}}}
		}
		g.sender, g.marks = s, c.marks
		groups = append(groups, g)
	}
	return groups, nil
}

// statement is an SQL statement and its arguments. handOff marks
// [store.HandOffOrderedSQL], whose rows the recording returns. scans are
// the planner settings it runs under ("": [store.TIDScans]).
type statement struct {
	sql     string
	args    []any
	handOff bool
	scans   string
}

// orderKey is an ordering key of a target.
type orderKey struct{ target, key string }

// deleteDeliveredSQL deletes up to $2 forwards delivered before $1. An
// InitPlan selects them once through the BRIN index on delivered_at, so its
// LIMIT holds. The DELETE finds them by ctid.
const deleteDeliveredSQL = `DELETE FROM forward_delivered WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM forward_delivered WHERE delivered_at < $1 LIMIT $2))`

// deliveredScans leaves deleteDeliveredSQL one path without a disabled
// node. It turns off sequential scans and JIT.
const deliveredScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// DeleteDeliveredBefore deletes up to limit of the fast path's forwards
// delivered before cutoff, in one short statement. It returns how many it
// deleted; fewer than limit means none are left. River deletes its
// finished jobs after the same retention.
func (q *Jobs) DeleteDeliveredBefore(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	var b pgx.Batch
	b.Queue(deliveredScans)
	b.Queue(deleteDeliveredSQL, cutoff, limit)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return 0, fmt.Errorf("delete old delivered forwards: %w", err)
	}
	tag, err := br.Exec()
	if err != nil {
		return 0, fmt.Errorf("delete old delivered forwards: %w", err)
	}
	return tag.RowsAffected(), nil
}
