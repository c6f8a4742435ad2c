-- +goose Up
-- ingest_deliveries performs an ingest pipeline's claim and state change in
-- one call (dedup.Delegated): on Citus, distributed by its first parameter
-- and colocated with processed_messages (migrations/citus/distribute.sql),
-- it runs on the worker that holds the sender's shard, in one round trip
-- from the coordinator and one commit there, where the statements of the
-- pipeline would each cost a round trip to the worker and a distributed
-- plan. hookgate calls it
-- only when Citus delegates it (docs/distributed.md); on PostgreSQL the
-- pipeline's own statements are one round trip already, and it is unused.
--
-- The arrays hold one element per delivery (the claim's and the events'),
-- or per forward (the outbox's). It sets the in-flight wait, claims the
-- keys under processed_messages_key (ON CONFLICT on its columns, the only
-- unique index on them) in the arrays' order, returns the
-- delivery ID and event ID of each key it inserted, and writes the events
-- and outbox rows of those deliveries only: an event ID is fresh, so
-- "among the event IDs it inserted" is "this call's claim took the key".
-- A key it did not insert (held already) is sorted out by the caller,
-- which reads what holds it. The columns are internal/events' insert and
-- internal/forward's outbox insert, value for value (the dedup tests run
-- both forms and compare the rows they wrote).
-- +goose StatementBegin
CREATE FUNCTION ingest_deliveries(
    in_sender text, in_lock_timeout text,
    in_delivery_ids text[], in_request_sha256s bytea[], in_event_ids uuid[], in_statuses int2[],
    in_content_types text[], in_bodies bytea[], in_created_ats timestamptz[], in_expires_ats timestamptz[],
    in_ev_ids uuid[], in_ev_delivery_ids text[], in_ev_received_ats timestamptz[], in_ev_headers jsonb[],
    in_ev_bodies bytea[], in_ev_types text[],
    in_ob_event_ids uuid[], in_ob_targets text[], in_ob_delivery_ids text[], in_ob_created_ats timestamptz[],
    in_ob_lease_ms int8[])
RETURNS TABLE (claimed_delivery_id text, claimed_event_id uuid)
LANGUAGE plpgsql AS $$
DECLARE
    claimed uuid[] := '{}';
    keys text := 'processed_messages';
    evs text := 'webhook_events';
    obx text := 'forward_outbox';
    shard bigint;
BEGIN
    -- On the Citus worker that holds the sender's shard group (where Citus
    -- delegates the call), the statements write the shards themselves, as
    -- Citus's local execution would after planning each of them as a
    -- distributed statement (measured: that planning was most of the
    -- call's time). Only when the caller owns the tables (the metadata
    -- lock requires it) and after taking the lock Citus's own writes take
    -- on the shard's metadata (ShareLock), which a shard move's cut-over
    -- waits for, and then finding the shard placed on this node: a call
    -- that runs elsewhere (not delegated, or after a move) writes the
    -- distributed tables, through Citus, as on PostgreSQL.
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        IF EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = 'processed_messages'::regclass)
                AND pg_has_role((SELECT relowner FROM pg_catalog.pg_class WHERE oid = 'processed_messages'::regclass), 'USAGE') THEN
            shard := get_shard_id_for_distribution_column('processed_messages', in_sender);
            PERFORM lock_shard_metadata(5, ARRAY[shard]);
            IF EXISTS (SELECT FROM pg_catalog.pg_dist_placement pl WHERE pl.shardid = shard
                    AND pl.groupid = (SELECT groupid FROM pg_catalog.pg_dist_local_group)) THEN
                keys := shard_name('processed_messages', shard);
                evs := shard_name('webhook_events', get_shard_id_for_distribution_column('webhook_events', in_sender));
                obx := shard_name('forward_outbox', get_shard_id_for_distribution_column('forward_outbox', in_sender));
            END IF;
        END IF;
    END IF;
    -- The in-flight wait bounds the claim's wait for a key another
    -- transaction holds (55P03 past it).
    PERFORM set_config('lock_timeout', in_lock_timeout, true);
    FOR claimed_delivery_id, claimed_event_id IN EXECUTE format(
        'INSERT INTO %s AS p
            (sender, delivery_id, request_sha256, event_id, response_status, response_content_type, response_body, created_at, expires_at)
        SELECT $1, d.* FROM unnest($2, $3, $4, $5, $6, $7, $8, $9) AS d
        ON CONFLICT (sender, delivery_id) DO NOTHING
        RETURNING p.delivery_id, p.event_id', keys)
        USING in_sender, in_delivery_ids, in_request_sha256s, in_event_ids, in_statuses,
            in_content_types, in_bodies, in_created_ats, in_expires_ats
    LOOP
        claimed := claimed || claimed_event_id;
        RETURN NEXT;
    END LOOP;
    IF cardinality(claimed) = 0 THEN
        RETURN;
    END IF;
    IF cardinality(in_ev_ids) > 0 THEN
        EXECUTE format('INSERT INTO %s (sender, id, delivery_id, received_at, headers, body, event_type)
        SELECT $1, e.* FROM unnest($2, $3, $4, $5, $6, $7) AS e(id, delivery_id, received_at, headers, body, event_type)
        WHERE e.id = ANY ($8)', evs)
        USING in_sender, in_ev_ids, in_ev_delivery_ids, in_ev_received_ats, in_ev_headers, in_ev_bodies, in_ev_types, claimed;
    END IF;
    IF cardinality(in_ob_event_ids) > 0 THEN
        EXECUTE format('INSERT INTO %s (sender, event_id, target, delivery_id, created_at, leased_until)
        SELECT $1, o.event_id, o.target, o.delivery_id, o.created_at, statement_timestamp() + o.lease_ms * interval ''1 millisecond''
        FROM unnest($2, $3, $4, $5, $6) AS o(event_id, target, delivery_id, created_at, lease_ms)
        WHERE o.event_id = ANY ($7)', obx)
        USING in_sender, in_ob_event_ids, in_ob_targets, in_ob_delivery_ids, in_ob_created_ats, in_ob_lease_ms, claimed;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION ingest_deliveries(text, text, text[], bytea[], uuid[], int2[], text[], bytea[], timestamptz[], timestamptz[],
    uuid[], text[], timestamptz[], jsonb[], bytea[], text[], uuid[], text[], text[], timestamptz[], int8[]);
