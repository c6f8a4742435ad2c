-- +goose Up
-- The fast path (issue 18): a process that accepted a delivery may attempt
-- its forwards itself right after COMMIT. Its outbox rows are then leased
-- in the ingest transaction itself: leased_until is set, and the relay
-- leaves a row alone until it passes. The row stays the durable promise
-- until the attempt's outcome is recorded (the row deleted and its River
-- job inserted in one statement); a failure to record, or a crash, leaves
-- it to the relay once the lease ends. NULL: not leased, the relay takes it
-- at once (every row written before this migration, and every row of a
-- process that does not dispatch). Adding a nullable column without a
-- default does not rewrite the table.
ALTER TABLE forward_outbox ADD COLUMN IF NOT EXISTS leased_until timestamptz;

-- +goose Down
ALTER TABLE forward_outbox DROP COLUMN IF EXISTS leased_until;
