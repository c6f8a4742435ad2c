-- +goose Up
-- A target's pause: a 429 or 503 with Retry-After makes the worker process
-- that got it hold the target's forwards until then (in memory, per
-- process, without using their attempts). paused_until is the latest such
-- pause any worker process recorded (NULL: none yet), pause_reason the
-- answer that asked for it (no URL in it), so that operators see why a
-- target's forwards wait although its breaker is closed. Written beside the
-- breaker's state, by the same processes; a few writes per pause.
ALTER TABLE target_breakers
    ADD COLUMN paused_until timestamptz,
    ADD COLUMN pause_reason text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE target_breakers
    DROP COLUMN pause_reason,
    DROP COLUMN paused_until;
