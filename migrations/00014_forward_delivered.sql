-- +goose Up
-- The fast path's delivered first attempts (issue 18). Most forwards are
-- delivered at their first attempt, which the process that accepted the
-- delivery makes right after COMMIT; recording each of them as a River job
-- (a wide row, seven indexes, two of them GIN over jsonb, and River's
-- statistics over jsonb) cost PostgreSQL more than the delivery itself.
-- Such a forward is recorded here instead, in the statement that deletes
-- its outbox row: one narrow row and two B-tree entries. Everything else
-- (a failed first attempt, every retry, every redelivery) stays a River
-- job. internal/store reads both tables as one set of forwards (the
-- operator API, the console, redelivery): a row here is a forward in River's
-- state "completed" after one attempt. Its ID comes from River's job
-- sequence, so that IDs order forwards across both tables (cursors, "the
-- newest forward of an event"). Rows are deleted after the longest sender
-- retention, as River deletes its finished jobs (internal/retention).
-- A local table on Citus, like River's.
CREATE TABLE forward_delivered (
    id           bigint      NOT NULL DEFAULT nextval('river_job_id_seq'),
    sender       text        NOT NULL,
    event_id     text        NOT NULL,
    target       text        NOT NULL,
    delivery_id  text        NOT NULL,
    created_at   timestamptz NOT NULL,
    attempted_at timestamptz NOT NULL,
    delivered_at timestamptz NOT NULL,
    status       smallint    NOT NULL,
    max_attempts smallint    NOT NULL,
    PRIMARY KEY (sender, event_id, target, id)
);
-- A target's forwards, newest first (lists, counts, bulk redelivery).
CREATE INDEX forward_delivered_target_idx ON forward_delivered (sender, target, id);
-- Retention deletes by time; a BRIN index costs next to nothing to keep.
CREATE INDEX forward_delivered_delivered_at_idx ON forward_delivered USING brin (delivered_at);

-- +goose Down
DROP TABLE IF EXISTS forward_delivered;
