-- +goose Up
-- On Citus (issue 34) a forward's outbox row lives on its sender's worker
-- and its record (River's job, or the fast path's forward_delivered row) on
-- the coordinator. A transaction that deletes the one and inserts the other
-- commits without two-phase commit, worker first: a coordinator that died
-- between the two commits lost the forward. There, the record is written
-- first, in a transaction that sets recorded_at on the outbox row instead of
-- deleting it, and the row is deleted in a transaction of its own right
-- after. A row with recorded_at set is left alone by the relay and the fast
-- path's recording; one whose recorded_at is older than the relay's grace
-- (its delete never came: a crash) is taken by the relay again, so that a
-- crash can only repeat a forward (with its Idempotency-Key), never lose it.
-- NULL: not recorded (every row on PostgreSQL, where the delete and the
-- record are one atomic statement). A nullable column without a default
-- does not rewrite the table.
ALTER TABLE forward_outbox ADD COLUMN IF NOT EXISTS recorded_at timestamptz;

-- +goose Down
ALTER TABLE forward_outbox DROP COLUMN IF EXISTS recorded_at;
