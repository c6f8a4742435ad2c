package forward

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// recordSQL records the fast path's finished forwards of sender $1: it
// deletes their outbox rows and, for each row it deleted, inserts the
// forward's River job already in its state after the first attempt
// (completed, retryable with its retry scheduled, cancelled or discarded),
// as River's worker would have left it. A row the relay took in the
// meantime (its lease ended) is not deleted, and gets no second job. The
// args are those Args encodes, so that River's worker, the operator
// queries and hookgate's index on the forward jobs find the job; it has no
// unique key (none is needed: the outbox row is deleted in the same
// statement).
const recordSQL = `WITH o AS (
  SELECT * FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int[], $6::timestamptz[], $7::timestamptz[], $8::timestamptz[], $9::jsonb[], $10::jsonb[])
    AS o(event_id, target, state, max_attempts, attempted_at, finalized_at, scheduled_at, error, metadata)
), d AS (
  DELETE FROM forward_outbox f USING o
  WHERE f.sender = $1 AND f.event_id = o.event_id AND f.target = o.target
  RETURNING f.event_id, f.target, f.delivery_id, f.created_at
)
INSERT INTO river_job (args, attempt, attempted_at, created_at, errors, finalized_at, kind, max_attempts, metadata, priority, queue, state, scheduled_at, tags)
SELECT jsonb_build_object('sender', $1::text, 'event_id', d.event_id, 'target', d.target, 'delivery_id', d.delivery_id),
       1, o.attempted_at, d.created_at, CASE WHEN o.error IS NULL THEN NULL ELSE ARRAY[o.error] END, o.finalized_at,
       $11::text, o.max_attempts, o.metadata, 1, $12::text, o.state::river_job_state, o.scheduled_at, '{}'
FROM d JOIN o ON o.event_id = d.event_id AND o.target = d.target`

// releaseSQL clears the lease of outbox rows of sender $1: the relay takes
// them at once.
const releaseSQL = `UPDATE forward_outbox SET leased_until = NULL
WHERE sender = $1 AND (event_id, target) IN (SELECT * FROM unnest($2::uuid[], $3::text[]))`

// recordOutcomes writes batch in one round trip and one transaction: per
// sender, one statement for the finished forwards and one for the released
// ones.
func recordOutcomes(ctx context.Context, db *pgxpool.Pool, batch []outcome) error {
	type cols struct {
		events, relEvents              [][16]byte
		targets, relTargets, states    []string
		maxAttempts                    []int32
		attempted, finalized, schedule []*time.Time
		errs, metas                    [][]byte
	}
	bySender := map[string]*cols{}
	var order []string
	for i := range batch {
		o := &batch[i]
		c := bySender[o.sender]
		if c == nil {
			c = &cols{}
			bySender[o.sender] = c
			order = append(order, o.sender)
		}
		if o.release {
			c.relEvents = append(c.relEvents, o.eventID)
			c.relTargets = append(c.relTargets, o.target)
			continue
		}
		c.events = append(c.events, o.eventID)
		c.targets = append(c.targets, o.target)
		c.states = append(c.states, o.state)
		c.maxAttempts = append(c.maxAttempts, int32(o.maxAttempts))
		c.attempted = append(c.attempted, &o.attemptedAt)
		c.finalized = append(c.finalized, o.finalizedAt)
		c.schedule = append(c.schedule, &o.scheduledAt)
		c.errs = append(c.errs, o.errJSON)
		meta := o.metadata
		if meta == nil {
			meta = []byte("{}")
		}
		c.metas = append(c.metas, meta)
	}
	var b pgx.Batch
	for _, s := range order {
		c := bySender[s]
		if len(c.events) > 0 {
			b.Queue(recordSQL, s, c.events, c.targets, c.states, c.maxAttempts, c.attempted, c.finalized, c.schedule,
				jsonbArray(c.errs), jsonbArray(c.metas), Args{}.Kind(), Queue)
		}
		if len(c.relEvents) > 0 {
			b.Queue(releaseSQL, s, c.relEvents, c.relTargets)
		}
	}
	if err := db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("record fast-path forwards: %w", err)
	}
	return nil
}

// jsonbArray returns values (encoded JSON, nil for NULL) as a jsonb[]
// parameter.
func jsonbArray(values [][]byte) []*string {
	out := make([]*string, len(values))
	for i, v := range values {
		if v != nil {
			s := string(v)
			out[i] = &s
		}
	}
	return out
}
