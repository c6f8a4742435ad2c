-- +goose Up
-- target_breakers holds the state of each forward target's circuit breaker
-- as the worker processes last saw it: written by a worker when a breaker
-- opens, probes or closes, read by the operator API (whose processes may not
-- work forwards themselves). Keyed by sender first, like every table.
CREATE TABLE target_breakers (
    sender     text        NOT NULL,
    target     text        NOT NULL,
    state      text        NOT NULL CHECK (state IN ('closed', 'open', 'half-open')),
    opened_at  timestamptz,
    updated_at timestamptz NOT NULL,
    last_error text        NOT NULL DEFAULT '',
    CONSTRAINT target_breakers_pkey PRIMARY KEY (sender, target)
);

-- +goose Down
DROP TABLE target_breakers;
