-- +goose NO TRANSACTION
-- Event types (issue 9): each event stores the type read from where its
-- sender's configuration says (event_type, set by the presets); existing
-- rows and deliveries without one keep ''. Adding a column with a constant
-- default does not rewrite the table. The column's collation is "C": event
-- types are identifiers, compared byte by byte, so that the operator API's
-- prefix filter (event_type=invoice.*) finds all the types of a prefix as
-- one contiguous range of the index, which a linguistic collation does not
-- guarantee.
--
-- The index serves GET /v1/senders/{sender}/deliveries?event_type=…: a
-- sender's events of one type, newest first, keyset-paginated on
-- (received_at DESC, delivery_id DESC) as the unfiltered list is; a prefix
-- walks the distinct types of the prefix in it (a loose index scan) and
-- merges their newest rows. Built CONCURRENTLY, so ingest keeps writing while
-- it builds (hence NO TRANSACTION); a run interrupted half-way leaves an
-- INVALID index and no recorded version, and the IF [NOT] EXISTS clauses let
-- the migration simply run again.

-- +goose Up
ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS event_type text COLLATE "C" NOT NULL DEFAULT '';
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_sender_type_received_idx;
CREATE INDEX CONCURRENTLY webhook_events_sender_type_received_idx
    ON webhook_events (sender, event_type, received_at DESC, delivery_id DESC);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_sender_type_received_idx;
ALTER TABLE webhook_events DROP COLUMN IF EXISTS event_type;
