-- +goose Up
-- processed_messages holds one row per accepted (sender, delivery_id): the
-- idempotency key. Its primary key constraint is named explicitly because
-- internal/dedup recognises a duplicate by that name and by nothing else.
CREATE TABLE processed_messages (
    sender                text        NOT NULL,
    delivery_id           text        NOT NULL,
    request_sha256        bytea       NOT NULL,
    event_id              uuid        NOT NULL,
    response_status       smallint    NOT NULL,
    response_content_type text        NOT NULL,
    response_body         bytea       NOT NULL,
    created_at            timestamptz NOT NULL,
    expires_at            timestamptz NOT NULL,
    CONSTRAINT processed_messages_key PRIMARY KEY (sender, delivery_id)
);

-- webhook_events holds the accepted deliveries themselves. Its key leads with
-- sender, like every table's, so the tables can be distributed by sender.
CREATE TABLE webhook_events (
    sender       text        NOT NULL,
    id           uuid        NOT NULL,
    delivery_id  text        NOT NULL,
    received_at  timestamptz NOT NULL,
    headers      jsonb       NOT NULL,
    body         bytea       NOT NULL,
    CONSTRAINT webhook_events_pkey PRIMARY KEY (sender, id)
);

-- +goose Down
DROP TABLE webhook_events;
DROP TABLE processed_messages;
