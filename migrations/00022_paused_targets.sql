-- +goose Up
-- paused_targets holds the targets an operator paused (POST
-- /v1/senders/{sender}/targets/{target}/pause, or the console's Pause
-- button): while a row's paused_until is NULL or has not passed, every
-- process holds the target's forwards (not attempted, no attempt used, the
-- breaker untouched). Every process reads the whole table about once a
-- second (a row per paused target); resume deletes the row, and a row whose
-- paused_until has passed is deleted by the first worker process that sees
-- it. paused_at is when the pause began, reason what the operator wrote,
-- paused_by who did it (the API or the console, and the client's address;
-- never a token). Unlike target_breakers.paused_until (a pause a target
-- asked for with Retry-After, held by the one worker process that got it),
-- this pause holds in every process, and survives restarts.
CREATE TABLE paused_targets (
    sender       text        NOT NULL,
    target       text        NOT NULL,
    paused_at    timestamptz NOT NULL,
    paused_until timestamptz,
    reason       text        NOT NULL DEFAULT '',
    paused_by    text        NOT NULL DEFAULT '',
    CONSTRAINT paused_targets_pkey PRIMARY KEY (sender, target)
);

-- +goose Down
DROP TABLE paused_targets;
