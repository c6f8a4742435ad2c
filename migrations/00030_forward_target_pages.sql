-- +goose NO TRANSACTION
-- A page of a target's forwards (the API's GET …/targets/{target}/forwards,
-- the console's failed forwards) reads its page, not the target's whole
-- history. River keeps a target's forward jobs for the retention: an
-- outage leaves one job per retried forward, and the pages read them all
-- and sorted them, a millisecond per thousand jobs.
--
-- Two indexes of hookgate's own on River's job table:
--   - over the forward jobs, by sender, target, state and ID: a page reads
--     each River state's newest jobs in the index's order, and merges
--     them; a bulk redelivery's batch reads each state's oldest from the
--     batch's first job on, the same way;
--   - over the failed forward jobs not marked superseded, by sender,
--     target, time of failure and ID: the failed forwards are listed by
--     when they failed.
-- A forward job costs one more entry in the first per state change, and
-- one in the second when it fails.
--
-- Migration 21's index over the forward jobs not completed, which no
-- statement has read since migration 23, is dropped: this release's
-- processes and the previous release's do not read it (see
-- docs/deployment.md, Upgrades). Migration 23's index over the forward jobs
-- not finished is still read by the counts; the new index by state could
-- serve them, and a later migration may drop it once no release reads it.
--
-- Built CONCURRENTLY, as migration 9's: the relay and the workers keep
-- writing jobs while they build, and an interrupted run leaves an INVALID
-- index, which the DROP before each CREATE removes when the migration runs
-- again.

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_state_idx;
CREATE INDEX CONCURRENTLY river_job_hookgate_forward_state_idx
    ON river_job ((args->>'sender'), (args->>'target'), state, id)
    WHERE kind = 'hookgate_forward';

DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_failed_at_idx;
CREATE INDEX CONCURRENTLY river_job_hookgate_forward_failed_at_idx
    ON river_job ((args->>'sender'), (args->>'target'), finalized_at, id)
    WHERE kind = 'hookgate_forward' AND state IN ('cancelled', 'discarded') AND NOT (metadata ? 'hookgate:superseded');

DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_open_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS river_job_hookgate_forward_open_idx
    ON river_job ((args->>'sender'), (args->>'target'), state, id)
    WHERE kind = 'hookgate_forward' AND state <> 'completed';
DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_failed_at_idx;
DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_state_idx;
