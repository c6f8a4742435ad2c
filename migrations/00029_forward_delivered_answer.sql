-- +goose Up
-- The attempt of a forward the fast path delivered at its first attempt
-- lives in its forward_delivered row (issue 49): how long it took, and the
-- target's answer (headers and the first 4 KiB of the body), kept as
-- forward_attempts keeps them. Its other columns are that row's:
-- started_at is attempted_at, the status and the acknowledgement are the
-- row's, and the cause is the first attempt. It saves the attempt's own
-- row and index entry: a third of what recording a delivered forward
-- costs PostgreSQL. Readers of an event's attempts read both tables
-- (internal/store). took_us is NULL on rows without one: those recorded
-- before this migration, and those whose attempt went to forward_attempts
-- (the split form on Citus). When the event is deleted before its
-- delivered forward, or the forward's newer attempts push it out of the
-- attempts kept, the three columns are cleared.
ALTER TABLE forward_delivered ADD COLUMN took_us bigint, ADD COLUMN headers jsonb, ADD COLUMN body bytea;

-- +goose Down
INSERT INTO forward_attempts (sender, event_id, target, started_at, took_us, outcome, cause, attempt, status, ack, headers, body)
SELECT sender, event_id::uuid, target, attempted_at, took_us, 'delivered', 'first', 1, status, ack, headers, body
FROM forward_delivered WHERE took_us IS NOT NULL
ON CONFLICT ON CONSTRAINT forward_attempts_pkey DO NOTHING;
ALTER TABLE forward_delivered DROP COLUMN IF EXISTS took_us, DROP COLUMN IF EXISTS headers, DROP COLUMN IF EXISTS body;
