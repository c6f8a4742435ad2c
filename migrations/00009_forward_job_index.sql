-- +goose NO TRANSACTION
-- An index of hookgate's own on River's job table, over the forward jobs
-- only: their sender, target and event (from args) and the job ID. The
-- operator API's target queries (counts, a target's forwards, bulk
-- redelivery) use it to find a target's jobs and to tell whether a forward
-- was followed by a newer one of the same event to the same target; River's
-- GIN index on args answers such a lookup in milliseconds, not microseconds
-- (every forward's args have the same keys, and jsonb_ops indexes keys).
-- Built CONCURRENTLY so that the relay and the workers keep writing jobs
-- while it builds; an interrupted run leaves an INVALID index, which the DROP
-- before the CREATE removes when the migration runs again.

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_idx;
CREATE INDEX CONCURRENTLY river_job_hookgate_forward_idx
    ON river_job ((args->>'sender'), (args->>'target'), (args->>'event_id'), id)
    WHERE kind = 'hookgate_forward';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_idx;
