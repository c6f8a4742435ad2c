-- +goose Up
-- forward_processes lists the processes that work forwards (--role all and
-- worker), by their River client ID: each writes its row about every second
-- while it runs and deletes it when it stops. A job River shows as running
-- whose last attempt was made by a process with no recent row is a job of a
-- process that died (SIGKILL, a crash, a lost host): the other processes
-- make it available again within seconds (forward.Takeover) instead of
-- waiting for River's rescuer, which runs once every 30 s in the elected
-- leader and only after --forward-rescue-after. UNLOGGED: a heartbeat needs
-- no WAL and no fsync; after a database crash the table is empty, and the
-- live processes write their rows again within a second of reconnecting
-- (a process takes over jobs only after it has itself been connected for
-- longer than a row may be stale, so a live process is never mistaken for
-- a dead one because the crash emptied its row).
CREATE UNLOGGED TABLE forward_processes (
    id         text        NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    CONSTRAINT forward_processes_pkey PRIMARY KEY (id)
);

-- +goose Down
DROP TABLE IF EXISTS forward_processes;
