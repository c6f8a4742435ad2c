package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river/rivertype"
)

// forward_delivered, the fast path's delivered first attempts (migration
// 14): the recording of the fast path's outcomes (a delivered forward as a
// row there, any other as its River job) and their retention.

// FirstAttempt is the outcome of a forward's first attempt made by the fast
// path (forward.Dispatcher), to record as its job (RecordFirstAttempts).
type FirstAttempt struct {
	Sender  string
	EventID uuid.UUID
	Target  string
	// Release: the forward was not attempted; its outbox row's lease is
	// cleared for the relay, and no job is inserted. The fields below are
	// then unused.
	Release bool
	// State is the forward's state after the attempt: delivered, pending,
	// or retrying (ScheduledAt is its retry; see recordedState),
	// or failed (FinalizedAt set): at once when FailedAtOnce (the target's
	// answer fails the forward without retries), else because its attempts
	// are used up.
	State        State
	FailedAtOnce bool
	MaxAttempts  int
	AttemptedAt  time.Time
	FinalizedAt  *time.Time
	ScheduledAt  time.Time
	// Error is the attempt's error text ("" when delivered); Output, when
	// its Status is not 0, the attempt's recorded output.
	Error  string
	Output Output
}

// The fast path's recording takes each attempted forward's outbox row in
// one of two ways (recordTake), and writes its record from what it took:
//
//   - deleting it (PostgreSQL): the record and the delete are one
//     statement, atomic;
//   - marking it recorded (recorded_at = the mark, a parameter), on Citus:
//     the outbox row is on the sender's worker, the record on the
//     coordinator, and a transaction writing both commits on the worker
//     first (no two-phase commit); a coordinator that died between the two
//     commits would leave the row deleted and no record. Marked, the row
//     stays until store.DeleteRecordedSQL deletes it, in a transaction of
//     its own after the record's COMMIT; a crash in between leaves it to
//     the relay after its grace, which inserts its job again: the forward
//     may be repeated (with its Idempotency-Key), never lost.
//
// Either way a row some recording marked already is not taken again.

// recordTake returns the CTE d of the recording statements: the outbox rows
// of sender $1 whose keys are the pairs of $2 and $3, deleted (mark "") or
// marked recorded at the parameter mark, returning their event, target,
// delivery and creation time.
func recordTake(mark string) string {
	take := "DELETE FROM forward_outbox f"
	if mark != "" {
		take = "UPDATE forward_outbox f SET recorded_at = " + mark + "::timestamptz"
	}
	return `d AS (
  ` + take + `
  WHERE f.sender = $1 AND f.ctid = ANY(` + store.OutboxRowsByKey + `) AND f.recorded_at IS NULL
  RETURNING f.event_id, f.target, f.delivery_id, f.created_at
)`
}

// recordFirst returns the statement that records the fast path's finished
// forwards of sender $1 that were not delivered: it takes their outbox
// rows (recordTake) and, for each row it took, inserts the forward's job in
// its state after the first attempt, as River's worker would have left it
// (attempt 1, the attempt's error, the output River's RecordOutput keeps
// under metadata.output). A row the relay took in the meantime (its lease
// ended) is not taken, and gets no second job. The args are those Args
// encodes; the job has no unique key (none is needed: its outbox row is
// taken in the same statement). The outbox rows are found by a probe of
// their key each, and taken by ctid (store.OutboxRowsByKey, under
// store.TIDScans: see plans.go), never by a scan of the sender's rows. d
// reads the arrays, not o: on Citus o is an intermediate result, and Citus
// refuses a ctid in a modification that reads one. A row updated between
// the statement's snapshot and the take is not taken (its new version has
// another ctid); only the fast path's release updates outbox rows, and
// never those of an attempted forward.
func recordFirst(mark string) string {
	return jobSQL(`WITH o AS (
  SELECT * FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int[], $6::timestamptz[], $7::timestamptz[], $8::timestamptz[], $9::jsonb[], $10::jsonb[])
    AS o(event_id, target, state, max_attempts, attempted_at, finalized_at, scheduled_at, error, metadata)
), ` + recordTake(mark) + `
INSERT INTO river_job (args, attempt, attempted_at, created_at, errors, finalized_at, kind, max_attempts, metadata, priority, queue, state, scheduled_at, tags)
SELECT jsonb_build_object('sender', $1::text, 'event_id', d.event_id, 'target', d.target, 'delivery_id', d.delivery_id),
       1, o.attempted_at, d.created_at, CASE WHEN o.error IS NULL THEN NULL ELSE ARRAY[o.error] END, o.finalized_at,
       {forward_kind}, o.max_attempts, o.metadata, 1, $11::text, o.state::river_job_state, o.scheduled_at, '{}'
FROM d JOIN o ON o.event_id = d.event_id AND o.target = d.target`)
}

// recordDelivered returns the statement that records the fast path's
// delivered forwards of sender $1 as recordFirst records the others, in
// forward_delivered instead of River's table: a row only for each outbox
// row it took.
func recordDelivered(mark string) string {
	return `WITH o AS (
  SELECT * FROM unnest($2::uuid[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::int2[], $7::int2[])
    AS o(event_id, target, attempted_at, delivered_at, status, max_attempts)
), ` + recordTake(mark) + `
INSERT INTO forward_delivered (sender, event_id, target, delivery_id, created_at, attempted_at, delivered_at, status, max_attempts)
SELECT $1::text, d.event_id::text, d.target, d.delivery_id, d.created_at, o.attempted_at, o.delivered_at, o.status, o.max_attempts
FROM d JOIN o ON o.event_id = d.event_id AND o.target = d.target`
}

// The recording statements: deleting the outbox rows, and (on Citus)
// marking them, the mark the last parameter.
var (
	recordFirstSQL         = recordFirst("")
	recordFirstMarkSQL     = recordFirst("$12")
	recordDeliveredSQL     = recordDelivered("")
	recordDeliveredMarkSQL = recordDelivered("$8")
)

// RecordFirstAttempts records the fast path's outcomes in one round trip:
// per sender, one statement for the delivered forwards
// (forward_delivered), one for the others that were attempted (their jobs
// on queue), each taking the forwards' outbox rows, and one for the
// released ones; all of them find the outbox rows by a probe of the key
// each (store.OutboxRowsByKey, under store.TIDScans). Each sender's
// statements are a transaction of their own (BEGIN … COMMIT in the batch,
// when it holds several senders): on Citus a sender's outbox rows live on
// one worker, and a transaction writing the rows of senders on two workers
// would commit in two phases. On Citus (Distributed) the statements mark
// the outbox rows instead of deleting them, and a second transaction of
// the sender deletes the rows it marked, after the first has committed
// (see recordTake). A failure leaves the senders before it recorded:
// recording them again finds no outbox row (or only marked ones) and does
// nothing. Run on a transaction (q on a pgx.Tx), everything is the
// caller's transaction.
func (q *Jobs) RecordFirstAttempts(ctx context.Context, queue string, batch []FirstAttempt) error {
	var mark *time.Time
	if q.split {
		at := time.Now().UTC().Truncate(time.Microsecond)
		mark = &at
	}
	groups, err := recordStatements(queue, batch, mark)
	if err != nil {
		return fmt.Errorf("record fast-path forwards: %w", err)
	}
	_, inTx := q.db.(pgx.Tx)
	own := (len(groups) > 1 || q.split) && !inTx
	var b pgx.Batch
	reset := false // the marks changed the planner settings
	for i, g := range groups {
		for j, tx := range g.txs() {
			if own {
				b.Queue("BEGIN")
			}
			if own || i == 0 && j == 0 || reset {
				b.Queue(store.TIDScans)
				reset = false
			}
			for _, s := range tx {
				b.Queue(s.sql, s.args...)
			}
			if j == 0 && len(g.marks) > 0 {
				queueMarks(&b, g.sender, g.marks, false)
				reset = true
			}
			if own {
				b.Queue("COMMIT")
			}
		}
	}
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("record fast-path forwards: %w", err)
	}
	return nil
}

// senderRecording is one sender's statements of a recording: record, the
// transaction that records (and releases), and, in the split form, remove,
// the transaction that deletes the outbox rows record marked.
type senderRecording struct {
	record []statement
	remove []statement
	// marks are the forwards record records (of sender): the failed jobs
	// of their events to their targets are superseded (failed.go), marked
	// at the end of record's transaction.
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

// riverSchedulerInterval is how often River's job scheduler, which runs in
// the elected leader only, makes the jobs whose time has come (retryable,
// scheduled) available: River's internal
// maintenance.JobSchedulerIntervalDefault, which a Client does not let us
// set. River's fetch takes available jobs alone (once their scheduled_at
// has come), so a retryable job due sooner than this would wait for the
// scheduler's next run: up to 5 s late.
const riverSchedulerInterval = 5 * time.Second

// recordedState is the River state in which RecordFirstAttempts records
// (at now) the job of a forward a first attempt left in a.State, as River's
// executor leaves its own jobs: pending as available; retrying as
// available when its retry (ScheduledAt) is due within River's scheduler
// interval, so that a fetch takes it once due, and as retryable otherwise,
// for the scheduling of due forwards (schedule.go) to make available
// before it is due; failed as cancelled
// when it failed at once (River's JobCancel) and as discarded when its
// attempts are used up. A delivered forward is a row of forward_delivered,
// not a job.
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

// recordStatements returns the statements RecordFirstAttempts sends (after
// store.TIDScans) for batch, with their arguments, one group per sender:
// the forms that delete the outbox rows, or, with a mark (the split form),
// those that mark them recorded at *mark and the delete of the rows so
// marked.
func recordStatements(queue string, batch []FirstAttempt, mark *time.Time) ([]senderRecording, error) {
	now := time.Now()
	// Event IDs go as pgtype.UUID, which pgx encodes in binary as they
	// are: a uuid.UUID is a driver.Valuer, which pgx encodes through its
	// text (formatted, then parsed again), a few percent of the
	// gateway's CPU under make bench's forwarding load.
	type cols struct {
		events, relEvents              []pgtype.UUID
		targets, relTargets, states    []string
		maxAttempts                    []int32
		attempted, finalized, schedule []*time.Time
		errs, metas                    []*string
		// The delivered ones.
		dEvents                []pgtype.UUID
		dTargets               []string
		dAttempted, dDelivered []time.Time
		dStatus, dMaxAttempts  []int16
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
		if a.Release {
			c.relEvents = append(c.relEvents, pgtype.UUID{Bytes: a.EventID, Valid: true})
			c.relTargets = append(c.relTargets, a.Target)
			continue
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
	}
	groups := make([]senderRecording, 0, len(order))
	for _, s := range order {
		c := bySender[s]
		var g senderRecording
		if len(c.dEvents) > 0 {
			if mark == nil {
				g.record = append(g.record, statement{recordDeliveredSQL, []any{s, c.dEvents, c.dTargets, c.dAttempted, c.dDelivered, c.dStatus, c.dMaxAttempts}})
			} else {
				g.record = append(g.record, statement{recordDeliveredMarkSQL, []any{s, c.dEvents, c.dTargets, c.dAttempted, c.dDelivered, c.dStatus, c.dMaxAttempts, *mark}})
			}
		}
		if len(c.events) > 0 {
			args := []any{s, c.events, c.targets, c.states, c.maxAttempts, c.attempted, c.finalized, c.schedule, c.errs, c.metas, queue}
			if mark == nil {
				g.record = append(g.record, statement{recordFirstSQL, args})
			} else {
				g.record = append(g.record, statement{recordFirstMarkSQL, append(args, *mark)})
			}
		}
		if len(c.relEvents) > 0 {
			g.record = append(g.record, statement{store.ReleaseOutboxSQL, []any{s, c.relEvents, c.relTargets}})
		}
		if mark != nil && len(c.dEvents)+len(c.events) > 0 {
			events := append(append([]pgtype.UUID(nil), c.dEvents...), c.events...)
			targets := append(append([]string(nil), c.dTargets...), c.targets...)
			g.remove = []statement{{store.DeleteRecordedSQL, []any{s, events, targets, *mark}}}
		}
		g.sender = s
		for i, e := range c.dEvents {
			g.marks = append(g.marks, ForwardKey{Target: c.dTargets[i], EventID: e.Bytes})
		}
		for i, e := range c.events {
			g.marks = append(g.marks, ForwardKey{Target: c.targets[i], EventID: e.Bytes})
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// statement is an SQL statement and its arguments.
type statement struct {
	sql  string
	args []any
}

// deleteDeliveredSQL deletes up to $2 delivered forwards delivered before
// $1: selected in an InitPlan, run once (its LIMIT holds), through the
// BRIN index on delivered_at, and deleted by ctid (a TID scan), under
// deliveredScans. forward_delivered is a local table on Citus.
const deleteDeliveredSQL = `DELETE FROM forward_delivered WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM forward_delivered WHERE delivered_at < $1 LIMIT $2))`

// deliveredScans leaves deleteDeliveredSQL one path without a disabled
// node: no sequential scan (so the InitPlan reads the BRIN index, and the
// DELETE the ctids), no JIT (see plans.go).
const deliveredScans = `SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// DeleteDeliveredBefore deletes up to limit of the fast path's delivered
// forwards (forward_delivered) delivered before cutoff, in one short
// statement, and returns how many it deleted: fewer than limit means none
// are left. River deletes its finished jobs after the same retention.
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
