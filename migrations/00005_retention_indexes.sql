-- +goose Up
-- The retention job deletes expired keys and old events in small batches;
-- these indexes let each batch find its rows without scanning the tables.
CREATE INDEX processed_messages_expires_at_idx ON processed_messages (expires_at);
CREATE INDEX webhook_events_sender_received_at_idx ON webhook_events (sender, received_at);

-- +goose Down
DROP INDEX webhook_events_sender_received_at_idx;
DROP INDEX processed_messages_expires_at_idx;
