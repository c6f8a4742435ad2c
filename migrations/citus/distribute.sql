-- Distributes hookgate's tables by sender on a Citus coordinator, after
-- `hookgate migrate` created them (docs/distributed.md). The three tables
-- the ingest transaction writes are colocated, so that a sender's key, its
-- event and its outbox rows live on one shard group and a sender's batch
-- commits on one worker. The console's closed-hour delivery counts are
-- colocated with the deliveries they count, and the signature tokens with
-- the deliveries that used them.
-- Sequential: so that the file also runs as one transaction (psql -1, or
-- one simple query), where Citus refuses to distribute a function after
-- parallel work on distributed tables.
SET citus.multi_shard_modify_mode TO 'sequential';
SELECT create_distributed_table('processed_messages', 'sender');
SELECT create_distributed_table('webhook_events', 'sender', colocate_with => 'processed_messages');
SELECT create_distributed_table('forward_outbox', 'sender', colocate_with => 'processed_messages');
-- The ordered targets' key sequences (migration 28) are written in the
-- ingest transaction, beside the outbox rows they order.
SELECT create_distributed_table('forward_keys', 'sender', colocate_with => 'processed_messages');
SELECT create_distributed_table('delivery_hour_counts', 'sender', colocate_with => 'processed_messages');
-- The single-use signature tokens (Mailgun's) are claimed by sender, just
-- before the delivery's transaction, and deleted by sender.
SELECT create_distributed_table('signature_tokens', 'sender', colocate_with => 'processed_messages');
-- The ingest function (migration 20): distributed by its sender and
-- colocated with processed_messages, Citus delegates a call to the worker
-- that holds the sender's shard, where it claims the keys and writes the
-- events and outbox rows in one round trip and one commit.
SELECT create_distributed_function(
    'ingest_deliveries(text, text, text[], bytea[], uuid[], int2[], text[], bytea[], timestamptz[], timestamptz[], uuid[], text[], timestamptz[], jsonb[], bytea[], text[], uuid[], text[], text[], timestamptz[], int8[])',
    'in_sender', colocate_with => 'processed_messages');

-- Every other table stays a local table of the coordinator, each for its
-- reason (a line `-- local: <table>: <why>` for every table a migration
-- creates and this file does not distribute; migrations'
-- TestCitusDDLNamesEveryTable checks that none is forgotten). None is a
-- reference table: a write to a reference table commits on every node in
-- two phases.
-- local: river_*: River's own tables (its migrations, not ours); River's queries name no sender.
-- local: goose_db_version: goose's version table, read and written by `hookgate migrate` only.
-- local: target_breakers: a few rows per target, written by worker processes when a breaker changes state, read by operator pages; never in an ingest transaction.
-- local: target_breaker_transitions: the breakers' history, written in one transaction with target_breakers (a few rows per breaker transition).
-- local: console_revoked_sessions: console sessions signed out, keyed by session, not by sender; read by the console only.
-- local: console_signouts: one row ("sign out everywhere"), not keyed by sender; read by the console only.
-- local: traffic_minutes: the console's per-minute counts (two days of them), flushed by each process about once a minute in one transaction for every sender, with the deletion of old minutes (distributed, that would commit on every worker in two phases); ingest never writes it.
-- local: traffic_hours: the same counts per hour (the day charts read it), written in the same flush transaction as traffic_minutes, for the same reason.
-- local: forward_delivered: the fast path's delivered first attempts, read together with River's (local) jobs in one statement by internal/store; written in the statement that deletes the forward's (distributed) outbox row, as River's job of any other outcome is.
-- local: paused_targets: the targets an operator paused, a row each, read whole by every process about once a second; written by operators, never in an ingest transaction.
-- local: target_rates: one row per target with a rate, updated once per attempt of its forwards by the worker processes (River's jobs are local too); never in an ingest transaction.
-- local: forward_processes: the worker processes' heartbeats (one row each, written every second, not keyed by sender), read with River's (local) running jobs to take over those of a process that died.
-- local: audit_log: the operators' audit trail, a row per operator action (a few a day), not keyed by sender, read newest first by the operator API and the console; never in an ingest transaction.
-- local: forward_attempts: every attempt of a forward with its answer, written in the fast path's recording transaction beside River's (local) jobs and forward_delivered rows, and by River's worker after each attempt; distributed, the recording's INSERT … SELECT from its arrays committed in two phases.
-- local: forward_failed_counts: the counts of failed forwards by sender, target and hour, written with the marks on River's (local) jobs they count, in the same statements.
