-- +goose Up
-- forward_outbox holds the forwards an ingest transaction decided on, one
-- narrow row per (event, target), written in the same transaction as the
-- delivery's claim and only if the claim took the key. Worker processes relay
-- the rows into River's job table in batches (take with FOR UPDATE SKIP
-- LOCKED, insert the jobs, delete the rows, in one transaction), so the
-- ingest transaction pays for one small insert instead of River's job row
-- and its indexes. Its key leads with sender, like every table's.
CREATE TABLE forward_outbox (
    sender      text        NOT NULL,
    event_id    uuid        NOT NULL,
    target      text        NOT NULL,
    delivery_id text        NOT NULL,
    created_at  timestamptz NOT NULL,
    CONSTRAINT forward_outbox_pkey PRIMARY KEY (sender, event_id, target)
);
-- Rows live for milliseconds: vacuum the dead ones often so that the relay's
-- scan stays short.
ALTER TABLE forward_outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

-- +goose Down
DROP TABLE forward_outbox;
