-- Distributes hookgate's tables by sender on a Citus coordinator, after
-- `hookgate migrate` created them (docs/distributed.md). The three tables
-- the ingest transaction writes are colocated, so that a sender's key, its
-- event and its outbox rows live on one shard group and a sender's batch
-- commits on one worker. River's tables, goose's version table,
-- target_breakers and forward_delivered (read with River's jobs) stay
-- local tables of the coordinator.
SELECT create_distributed_table('processed_messages', 'sender');
SELECT create_distributed_table('webhook_events', 'sender', colocate_with => 'processed_messages');
SELECT create_distributed_table('forward_outbox', 'sender', colocate_with => 'processed_messages');
