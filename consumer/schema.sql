-- The table of github.com/hookgate/hookgate/consumer: one row per message a
-- consumer has processed. Run it with your own migration tool (it is also
-- consumer.Schema, and consumer.Migrate runs it). It is idempotent.
CREATE TABLE IF NOT EXISTS consumer_processed_messages (
    consumer_name         text        NOT NULL,
    message_id            text        NOT NULL,
    processed_at          timestamptz NOT NULL DEFAULT now(),
    response_status       smallint    NOT NULL DEFAULT 0,
    response_content_type text        NOT NULL DEFAULT '',
    response_body         bytea       NOT NULL DEFAULT '',
    CONSTRAINT consumer_processed_messages_key PRIMARY KEY (consumer_name, message_id)
);

-- Retention (DeleteProcessedBefore) deletes a consumer's oldest rows first.
CREATE INDEX IF NOT EXISTS consumer_processed_messages_processed_at
    ON consumer_processed_messages (consumer_name, processed_at);
