-- +goose Up
-- signature_tokens remembers the single-use tokens of the signature schemes
-- that sign a token and a timestamp instead of the body (Mailgun's): a
-- genuine signature says nothing about the event beside it, so each token
-- is accepted for one delivery only, its ID and the SHA-256 of its stored
-- body (Mailgun's retry of that delivery carries both again). signed_at is
-- the token's signed timestamp: a request with the token passes the
-- signature check only while signed_at is within the sender's tolerance,
-- and the retention job deletes the rows past it (with the tolerance
-- configured then, plus a margin for clocks), sender by sender, in
-- batches. The token itself is not kept, only its SHA-256: the key stays
-- short whatever a signed token's length. The key leads with sender, as
-- every table's: on Citus the table is distributed by sender, colocated
-- with processed_messages (migrations/citus/distribute.sql).
CREATE TABLE signature_tokens (
    sender         text        NOT NULL,
    token_sha256   bytea       NOT NULL,
    delivery_id    text        NOT NULL,
    request_sha256 bytea       NOT NULL,
    signed_at      timestamptz NOT NULL,
    CONSTRAINT signature_tokens_pkey PRIMARY KEY (sender, token_sha256)
);
CREATE INDEX signature_tokens_sender_signed_at_idx ON signature_tokens (sender, signed_at);

-- +goose Down
DROP TABLE IF EXISTS signature_tokens;
