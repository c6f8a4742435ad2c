-- Rule errors (issue 46): a target's filter that fails to evaluate on a
-- delivery (a missing key read without has(), a wrong type) gives that
-- target no forward. The delivery is still accepted, and its event
-- records why: a JSON array of {"target", "rule", "error"}, with CEL's
-- message only, never a value of the body. NULL when no rule failed,
-- which is nearly every event: adding a nullable column without a default
-- rewrites nothing.
--
-- Ingest writes it in the delivery's transaction, with the event. Only an
-- event with rule errors names the column: its insert is not the one the
-- ingest function (migration 20) performs, so on Citus such a delivery
-- runs in the statement forms (docs/distributed.md), and every other one
-- keeps its one call.

-- +goose Up
ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS rule_errors jsonb;

-- +goose Down
ALTER TABLE webhook_events DROP COLUMN IF EXISTS rule_errors;
