-- +goose Up
-- traffic_minutes holds the console's charts: per sender, per minute, how
-- many deliveries were accepted, replayed and refused (target = ''), and per
-- target how many forward attempts were delivered and failed (a failed
-- attempt is one the target did not answer 2xx to, whether retried or not)
-- with the sum of their latencies. Each process counts in memory and adds
-- its counts here about once a minute (INSERT … ON CONFLICT … n = n + …), so
-- ingest never writes it. Rows are kept for two days (retention job).
CREATE TABLE traffic_minutes (
    sender  text        NOT NULL,
    target  text        NOT NULL DEFAULT '',
    kind    text        NOT NULL,
    minute  timestamptz NOT NULL,
    n       bigint      NOT NULL DEFAULT 0,
    sum_ms  bigint      NOT NULL DEFAULT 0,
    CONSTRAINT traffic_minutes_pkey PRIMARY KEY (sender, target, kind, minute)
);
CREATE INDEX traffic_minutes_minute ON traffic_minutes (minute);

-- +goose Down
DROP TABLE traffic_minutes;
