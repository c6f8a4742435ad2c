-- +goose Up
-- signature_tokens remembers the single-use tokens of the signature schemes
-- that sign a token and a timestamp instead of the body (Mailgun's): a
-- genuine signature says nothing about the event beside it, so each token
-- is accepted for one delivery only, its ID and the SHA-256 of its stored
-- body (Mailgun's retry of that delivery carries both again). A row is
-- kept until its timestamp leaves the sender's tolerance (expires_at),
-- after which the signature check refuses the token anyway; the retention
-- job deletes expired rows, sender by sender, in batches. The token itself
-- is not kept, only its SHA-256: the key stays short whatever a signed
-- token's length. The key leads with sender, as every table's: on Citus
-- the table is distributed by sender, colocated with processed_messages
-- (migrations/citus/distribute.sql).
CREATE TABLE signature_tokens (
    sender         text        NOT NULL,
    token_sha256   bytea       NOT NULL,
    delivery_id    text        NOT NULL,
    request_sha256 bytea       NOT NULL,
    expires_at     timestamptz NOT NULL,
    CONSTRAINT signature_tokens_pkey PRIMARY KEY (sender, token_sha256)
);
CREATE INDEX signature_tokens_sender_expires_at_idx ON signature_tokens (sender, expires_at);

-- +goose Down
DROP TABLE IF EXISTS signature_tokens;
