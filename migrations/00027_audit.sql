-- +goose Up
-- audit_log is the operators' audit trail: one row per operator action
-- (sign-in, sign-out, redelivery of one event or in bulk, pause, resume,
-- a configuration reload, and any changing request a read token was
-- refused), written after the action by the operator API, the console or
-- the process that reloaded. Who: the name of the token (never its value),
-- "signal" or "watch" for a reload without a request, and the client's
-- address as the wrong-token limit sees it ('' when there is none). What:
-- the action, and the sender, target, event and delivery it concerns. How
-- it went: ok, refused (a 4xx: the request was wrong or not allowed) or
-- error (the action failed), with a short word (a problem type), never a
-- secret. details holds a few bounded facts (a pause's reason and end, a
-- reload's hashes, how many forwards a bulk redelivery queued). Only
-- checked tokens write rows: failed sign-ins are not recorded, so a
-- stranger cannot fill the table. Retention deletes rows older than its
-- audit retention (90 days by default), by at.
CREATE TABLE audit_log (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    at          timestamptz NOT NULL DEFAULT now(),
    token_name  text        NOT NULL,
    client_addr text        NOT NULL DEFAULT '',
    action      text        NOT NULL,
    sender      text        NOT NULL DEFAULT '',
    target      text        NOT NULL DEFAULT '',
    event_id    uuid,
    delivery_id text        NOT NULL DEFAULT '',
    outcome     text        NOT NULL,
    detail      text        NOT NULL DEFAULT '',
    details     jsonb,
    CONSTRAINT audit_log_pkey PRIMARY KEY (id),
    CONSTRAINT audit_log_outcome CHECK (outcome IN ('ok', 'refused', 'error')),
    CONSTRAINT audit_log_bounded CHECK (
        length(token_name) <= 64 AND length(client_addr) <= 64 AND length(action) <= 64
        AND length(sender) <= 256 AND length(target) <= 256 AND length(delivery_id) <= 1024
        AND length(detail) <= 256 AND (details IS NULL OR octet_length(details::text) <= 4096))
);
CREATE INDEX audit_log_at ON audit_log (at);

-- +goose Down
DROP TABLE IF EXISTS audit_log;
