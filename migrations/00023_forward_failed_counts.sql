-- +goose NO TRANSACTION
-- A sender's count of failed forwards, kept (issue 43): the count is of
-- the failed forward jobs (River's states cancelled and discarded) that no
-- newer forward of the same event to the same target followed. Read by
-- checking each failed job for a newer one (two index probes each) it cost
-- about 10 µs per failed forward kept: 100 ms for a sender with 10,000.
--
-- Hookgate now marks a forward job superseded (metadata key
-- "hookgate:superseded") in the transaction that adds a newer forward of
-- its event to its target (a redelivery, the relay's job of an outbox row,
-- the fast path's record), whatever the old job's state, so that a
-- forward under way when it is redelivered is already marked when it
-- fails. Working processes then fold the failed forward jobs not
-- superseded into forward_failed_counts, by sender, target and hour of
-- failure, marking each folded job counted ("hookgate:counted"); marking
-- a counted job superseded takes it out of its hour's count in the same
-- statement. A sender's count of failed forwards is the sum of its hours
-- here and the failed jobs not folded yet: a few rows per target and
-- hour, whatever the number of failed forwards.
--
-- The indexes are hookgate's own on River's job table: over the failed
-- forward jobs not superseded, by sender, target, event and ID (the
-- marking's probes of an event's failed forwards), and those not counted
-- yet by sender and ID (the fold, and the counts' jobs not folded yet);
-- and over the forward jobs not finished, by sender, target, state and ID
-- (the counts of the forwards pending, running and retrying). Migration
-- 21's index over those not completed (it holds the failed ones too,
-- which the counts no longer read one by one) is no longer read, and is
-- left for the processes of the previous release, which read it while a
-- rollout replaces them (see docs/deployment.md, Upgrades): a later
-- migration drops it. Built CONCURRENTLY, as migration 9's; an
-- interrupted run leaves an INVALID index, which the DROP before each
-- CREATE removes when the migration runs again.
--
-- Then the forward jobs River has not completed that a newer forward
-- already followed are marked superseded, as the code before this
-- migration told them (a newer job, or a delivered first attempt, of the
-- same sender, event and target with a larger ID), each locked FOR UPDATE
-- SKIP LOCKED: a job River holds at that moment is left unmarked (see
-- docs/console.md).

-- +goose Up
CREATE TABLE IF NOT EXISTS forward_failed_counts (
    sender text        NOT NULL,
    target text        NOT NULL,
    hour   timestamptz NOT NULL,
    n      bigint      NOT NULL,
    CONSTRAINT forward_failed_counts_pkey PRIMARY KEY (sender, target, hour)
);

DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_failed_idx;
CREATE INDEX CONCURRENTLY river_job_hookgate_forward_failed_idx
    ON river_job ((args->>'sender'), (args->>'target'), (args->>'event_id'), id)
    WHERE kind = 'hookgate_forward' AND state IN ('cancelled', 'discarded') AND NOT (metadata ? 'hookgate:superseded');

DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_uncounted_idx;
CREATE INDEX CONCURRENTLY river_job_hookgate_forward_uncounted_idx
    ON river_job ((args->>'sender'), id)
    WHERE kind = 'hookgate_forward' AND state IN ('cancelled', 'discarded') AND NOT (metadata ? 'hookgate:superseded') AND NOT (metadata ? 'hookgate:counted');

DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_unfinished_idx;
CREATE INDEX CONCURRENTLY river_job_hookgate_forward_unfinished_idx
    ON river_job ((args->>'sender'), (args->>'target'), state, id)
    WHERE kind = 'hookgate_forward' AND state NOT IN ('cancelled', 'completed', 'discarded');

UPDATE river_job SET metadata = metadata || '{"hookgate:superseded": true}'
WHERE ctid = ANY(ARRAY(SELECT j.ctid FROM river_job j
  WHERE j.kind = 'hookgate_forward' AND j.state <> 'completed' AND NOT (j.metadata ? 'hookgate:superseded')
    AND (EXISTS (SELECT 1 FROM river_job n WHERE n.kind = 'hookgate_forward'
          AND n.args->>'sender' = j.args->>'sender' AND n.args->>'target' = j.args->>'target'
          AND n.args->>'event_id' = j.args->>'event_id' AND n.id > j.id)
      OR EXISTS (SELECT 1 FROM forward_delivered n WHERE n.sender = j.args->>'sender'
          AND n.event_id = j.args->>'event_id' AND n.target = j.args->>'target' AND n.id > j.id))
  FOR UPDATE OF j SKIP LOCKED));

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_unfinished_idx;
DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_uncounted_idx;
DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_failed_idx;
DROP TABLE IF EXISTS forward_failed_counts;
