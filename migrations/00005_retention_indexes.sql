-- +goose NO TRANSACTION
-- The retention job deletes expired keys and old events in small batches;
-- these indexes let each batch find its rows without scanning the tables.
-- Built CONCURRENTLY (outside a transaction) so that ingest keeps writing
-- while they build; an interrupted run leaves an INVALID index, which the
-- DROP … IF EXISTS before each CREATE removes when the migration runs again.

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS processed_messages_expires_at_idx;
CREATE INDEX CONCURRENTLY processed_messages_expires_at_idx ON processed_messages (expires_at);
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_sender_received_at_idx;
CREATE INDEX CONCURRENTLY webhook_events_sender_received_at_idx ON webhook_events (sender, received_at);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_sender_received_at_idx;
DROP INDEX CONCURRENTLY IF EXISTS processed_messages_expires_at_idx;
