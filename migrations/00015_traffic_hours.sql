-- +goose Up
-- traffic_hours holds the same counts as traffic_minutes, per hour: each
-- flush adds its counts to the minute's row and to the hour's, so that the
-- console's day charts read 24 rows per sender, target and kind instead of
-- 1,440 (their latency histograms above all). Kept two days, like the
-- minutes. Filled here from the minutes already stored.
CREATE TABLE traffic_hours (
    sender       text        NOT NULL,
    target       text        NOT NULL DEFAULT '',
    kind         text        NOT NULL,
    hour         timestamptz NOT NULL,
    n            bigint      NOT NULL DEFAULT 0,
    sum_ms       bigint      NOT NULL DEFAULT 0,
    latency_hist bigint[],
    CONSTRAINT traffic_hours_pkey PRIMARY KEY (sender, target, kind, hour)
);
CREATE INDEX traffic_hours_hour ON traffic_hours (hour);

INSERT INTO traffic_hours (sender, target, kind, hour, n, sum_ms)
SELECT sender, target, kind, date_bin('1 hour', minute, TIMESTAMPTZ '2000-01-01 00:00:00+00'), sum(n), sum(sum_ms)
FROM traffic_minutes GROUP BY 1, 2, 3, 4;
UPDATE traffic_hours h SET latency_hist = s.hist FROM (
  SELECT sender, target, kind, hour, array_agg(v ORDER BY i) AS hist FROM (
    SELECT m.sender, m.target, m.kind, date_bin('1 hour', m.minute, TIMESTAMPTZ '2000-01-01 00:00:00+00') AS hour, u.i, sum(u.v) AS v
    FROM traffic_minutes m, unnest(m.latency_hist) WITH ORDINALITY AS u(v, i) GROUP BY 1, 2, 3, 4, 5) AS b
  GROUP BY 1, 2, 3, 4) AS s
WHERE h.sender = s.sender AND h.target = s.target AND h.kind = s.kind AND h.hour = s.hour;

-- +goose Down
DROP TABLE traffic_hours;
