-- +goose Up
-- target_breaker_transitions is the history of each target's circuit
-- breaker: one row per transition (closed → open, open → half-open,
-- half-open → open, → closed) with its time and reason, written by the
-- worker process whose breaker it is, in the transaction that updates
-- target_breakers. process names that process (host/pid): each worker
-- process has its own breaker. seq orders one process's transitions of a
-- target. Rows older than two days are deleted by the next write of the
-- target's transitions. Read by the console's target page.
CREATE TABLE target_breaker_transitions (
    sender     text        NOT NULL,
    target     text        NOT NULL,
    at         timestamptz NOT NULL,
    process    text        NOT NULL,
    seq        bigint      NOT NULL,
    from_state text        NOT NULL CHECK (from_state IN ('closed', 'open', 'half-open')),
    state      text        NOT NULL CHECK (state IN ('closed', 'open', 'half-open')),
    reason     text        NOT NULL DEFAULT '',
    CONSTRAINT target_breaker_transitions_pkey PRIMARY KEY (sender, target, at, process, seq)
);

-- latency_hist is, on a target's rows (delivered, failed), how many of the
-- minute's attempts took at most each of the fixed bounds of
-- store.LatencyBoundsMS (and, last, more than the largest), added up by
-- the flushes like n; the console estimates p50 and p95 from it. NULL on
-- ingest rows.
ALTER TABLE traffic_minutes ADD COLUMN latency_hist bigint[];

-- delivery_hour_counts holds, per sender and closed hour, how many
-- deliveries were stored with each response status (status 0: all of
-- them, and the mark that the hour is counted). The console's overview
-- counts an hour once from processed_messages, when the hour is over and
-- no ingest can still add to it, and reads the count from here after
-- that; only the open ends of the day are counted from processed_messages
-- at each view. Rows older than two days are deleted when hours are added.
CREATE TABLE delivery_hour_counts (
    sender text        NOT NULL,
    hour   timestamptz NOT NULL,
    status smallint    NOT NULL,
    n      bigint      NOT NULL,
    CONSTRAINT delivery_hour_counts_pkey PRIMARY KEY (sender, hour, status)
);

-- +goose Down
DROP TABLE delivery_hour_counts;
ALTER TABLE traffic_minutes DROP COLUMN latency_hist;
DROP TABLE target_breaker_transitions;
