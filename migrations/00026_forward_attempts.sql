-- +goose Up
-- Every attempt of a forward, with its answer (issue 47): when it started,
-- how long it took, its outcome, the target's HTTP status or the broker's
-- acknowledgement, the error, the response's headers (credential-like
-- ones redacted) and the first 4 KiB of its body, as received. The cause
-- says why the attempt was made: the first attempt, a retry (attempt is
-- River's attempt number), a redelivery (actor names who asked), or a
-- takeover after the process running it died.
--
-- The fast path writes its first attempt in the batch and transaction
-- that record its outcome; River's worker writes each of its attempts
-- (many in one round trip) and, in the same statement, deletes the
-- forward's attempts beyond the last --forward-attempts-kept. Retention
-- deletes an event's attempts with the event. The key is the forward (sender, event, target) and the start, so
-- that recording one attempt again writes nothing. A local table on Citus,
-- like forward_delivered and River's.
CREATE TABLE forward_attempts (
    sender     text        NOT NULL,
    event_id   uuid        NOT NULL,
    target     text        NOT NULL,
    started_at timestamptz NOT NULL,
    took_us    bigint      NOT NULL,
    outcome    text        NOT NULL CHECK (outcome IN ('delivered', 'retry', 'failed')),
    cause      text        NOT NULL CHECK (cause IN ('first', 'retry', 'redelivery', 'takeover')),
    attempt    integer     NOT NULL,
    actor      text,
    job_id     bigint,
    status     smallint,
    ack        text,
    error      text,
    headers    jsonb,
    body       bytea,
    CONSTRAINT forward_attempts_pkey PRIMARY KEY (sender, event_id, target, started_at)
);

-- A broker's acknowledgement of a forward the fast path delivered, shown
-- with its time like a worker's (River's job keeps it in its output).
ALTER TABLE forward_delivered ADD COLUMN ack text;

-- +goose Down
ALTER TABLE forward_delivered DROP COLUMN IF EXISTS ack;
DROP TABLE IF EXISTS forward_attempts;
