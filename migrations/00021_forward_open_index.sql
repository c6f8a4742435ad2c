-- +goose NO TRANSACTION
-- An index of hookgate's own on River's job table, over the forward jobs
-- River has not completed: waiting, running and failed ones (cancelled,
-- discarded), by sender, target, state and job ID. A sender's forward
-- counts (the API's targets, the console's overview) read that sender's
-- such jobs alone through it: not every sender's, as River's index on job
-- state would give them, nor the completed ones River keeps for the
-- longest retention, as migration 9's index would (issue 43). A completed
-- job is not in it; a waiting or running one costs one more index entry
-- per state change until it completes.
-- Built CONCURRENTLY so that the relay and the workers keep writing jobs
-- while it builds; an interrupted run leaves an INVALID index, which the DROP
-- before the CREATE removes when the migration runs again.

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_open_idx;
CREATE INDEX CONCURRENTLY river_job_hookgate_forward_open_idx
    ON river_job ((args->>'sender'), (args->>'target'), state, id)
    WHERE kind = 'hookgate_forward' AND state <> 'completed';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS river_job_hookgate_forward_open_idx;
