-- +goose Up
-- Ordered delivery per key (issue 48). A target with `ordering:` gives
-- each of its forwards a key (read from the event like a delivery ID) and
-- a position in that key's sequence, assigned in the ingest transaction:
-- forward_keys holds, per (sender, target, key), the last position given
-- (last_seq) and the position whose forward may be attempted (head_seq).
-- The ingest transaction increments last_seq under the row's lock, held
-- until its COMMIT, so positions follow the order of the commits and have
-- no gaps. Its outbox rows carry the key and position; a row behind the
-- head waits with leased_until 'infinity', which the relay never takes.
-- The transaction that records the head's end (delivered, or given up
-- when the target skips failures) moves head_seq on and clears the next
-- row's lease, in its own statements. blocked_event is the head that
-- failed and holds its key until an operator redelivers or skips it.
-- Distributed by sender on Citus, with the outbox rows it orders.
CREATE TABLE forward_keys (
    sender        text        NOT NULL,
    target        text        NOT NULL,
    order_key     text        NOT NULL,
    last_seq      bigint      NOT NULL,
    head_seq      bigint      NOT NULL,
    blocked_event uuid,
    blocked_at    timestamptz,
    updated_at    timestamptz NOT NULL,
    CONSTRAINT forward_keys_pkey PRIMARY KEY (sender, target, order_key)
);
-- Each forward updates its key's row twice (its position, then its end):
-- room on each page for the new versions keeps the updates HOT, and
-- vacuum runs often.
ALTER TABLE forward_keys SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_threshold = 1000);
CREATE INDEX forward_keys_blocked ON forward_keys (sender, target) WHERE blocked_event IS NOT NULL;
-- handed_off marks a row whose lease a forward's end gave to the process
-- that recorded it, so that the process whose ingest wrote the row does not
-- take that lease for its own.
ALTER TABLE forward_outbox ADD COLUMN IF NOT EXISTS order_key text, ADD COLUMN IF NOT EXISTS seq bigint, ADD COLUMN IF NOT EXISTS handed_off boolean;
CREATE UNIQUE INDEX forward_outbox_order ON forward_outbox (sender, target, order_key, seq) WHERE order_key IS NOT NULL;

-- +goose Down
DROP INDEX IF EXISTS forward_outbox_order;
ALTER TABLE forward_outbox DROP COLUMN IF EXISTS order_key, DROP COLUMN IF EXISTS seq, DROP COLUMN IF EXISTS handed_off;
DROP TABLE forward_keys;
