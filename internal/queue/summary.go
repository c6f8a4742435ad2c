package queue

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river/rivertype"
)

// Summary counts an event's targets by the state of its newest forward to
// each. A redelivery replaces the forward it follows. States with 0 are
// absent.
type Summary map[State]int

// maxSummaryEvents bounds the events of one [Jobs.ForwardSummaries] call,
// because the statement probes an index per event and target. A page of
// deliveries is far fewer.
const maxSummaryEvents = 500

// summaryJobsSQL finds, for each event $2 of sender $1 and each target
// $3, the newest forward job and the newest delivered first attempt. Each
// is one index probe.
var summaryJobsSQL = jobSQL(`SELECT e.event_id, t.target, j.id, j.state, j.failed
FROM unnest($2::text[]) AS e(event_id) CROSS JOIN unnest($3::text[]) AS t(target)
CROSS JOIN LATERAL (SELECT n.id, n.state::text AS state, ` + failedAttempt("n") + ` AS failed FROM river_job n
  WHERE n.kind = {forward_kind} AND n.args->>'sender' = $1 AND n.args->>'target' = t.target
    AND n.args->>'event_id' >= e.event_id AND n.args->>'event_id' <= e.event_id
  ORDER BY n.args->>'event_id' DESC, n.id DESC LIMIT 1) j
UNION ALL
SELECT e.event_id, t.target, d.id, $4::text, false
FROM unnest($2::text[]) AS e(event_id) CROSS JOIN unnest($3::text[]) AS t(target)
CROSS JOIN LATERAL (SELECT d.id FROM forward_delivered d WHERE d.sender = $1 AND d.event_id >= e.event_id AND d.event_id <= e.event_id AND d.target = t.target
  ORDER BY d.event_id DESC, d.target DESC, d.id DESC LIMIT 1) d`)

// summaryOutboxSQL finds the outbox rows of sender $1's events $2 to the
// targets $3, and whether a fast path holds each. It probes the outbox's
// key once per event and target. Rows already recorded are skipped.
var summaryOutboxSQL = `SELECT k.event_id::text, t.target, coalesce(o.leased_until > statement_timestamp(), false)
FROM unnest($2::uuid[]) AS k(event_id) CROSS JOIN unnest($3::text[]) AS t(target)
CROSS JOIN LATERAL (SELECT o.leased_until FROM forward_outbox o WHERE o.sender = $1 AND o.event_id = k.event_id AND o.target = t.target
  AND ` + store.Unrecorded("o") + ` LIMIT 1) o`

// summaryJobsArgs are summaryJobsSQL's arguments.
func summaryJobsArgs(sender string, targets, events []string) []any {
	return []any{sender, events, targets, jobCompleted}
}

// ForwardSummaries returns, by event, the state of each event's newest
// forward to each of targets. It takes up to maxSummaryEvents events. An
// outbox row counts as pending, or as running while a fast path attempts
// it. An event without any forward is absent. It is one round trip of two
// statements, so the console reads a page's summaries with it.
func (q *Jobs) ForwardSummaries(ctx context.Context, sender string, targets []string, events []uuid.UUID) (map[uuid.UUID]Summary, error) {
	out := map[uuid.UUID]Summary{}
	if len(events) == 0 || len(targets) == 0 {
		return out, nil
	}
	if len(events) > maxSummaryEvents {
		return nil, fmt.Errorf("forward summaries: %d events, at most %d", len(events), maxSummaryEvents)
	}
	texts := make([]string, len(events))
	ids := make([]pgtype.UUID, len(events))
	for i, e := range events {
		texts[i], ids[i] = e.String(), pgtype.UUID{Bytes: e, Valid: true}
	}
	type key struct{ event, target string }
	type newest struct {
		id    int64
		state State
	}
	var b pgx.Batch
	b.Queue(store.IndexOrderScans)
	b.Queue(summaryJobsSQL, summaryJobsArgs(sender, targets, texts)...)
	b.Queue(summaryOutboxSQL, sender, ids, targets)
	br := q.db.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("forward summaries of %s: %w", sender, err)
	}
	rows, err := br.Query() //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		return nil, fmt.Errorf("forward summaries of %s: %w", sender, err)
	}
	found := map[key]newest{}
	var (
		k      key
		id     int64
		state  string
		failed bool
	)
	_, err = pgx.ForEachRow(rows, []any{&k.event, &k.target, &id, &state, &failed}, func() error {
		if n, ok := found[k]; !ok || id > n.id {
			found[k] = newest{id: id, state: stateOf(rivertype.JobState(state), failed)}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("forward summaries of %s: %w", sender, err)
	}
	rows, err = br.Query() //nolint:rowserrcheck // pgx.ForEachRow checks rows.Err
	if err != nil {
		return nil, fmt.Errorf("forward summaries of %s (outbox): %w", sender, err)
	}
	var leased bool
	_, err = pgx.ForEachRow(rows, []any{&k.event, &k.target, &leased}, func() error {
		if leased {
			found[k] = newest{state: StateRunning} // the fast path's attempt is the newest
		} else if _, ok := found[k]; !ok {
			found[k] = newest{state: StatePending}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("forward summaries of %s (outbox): %w", sender, err)
	}
	for k, n := range found {
		e, err := uuid.Parse(k.event)
		if err != nil {
			continue // a malformed job's event
		}
		if out[e] == nil {
			out[e] = Summary{}
		}
		out[e][n.state]++
	}
	return out, nil
}

// summaryOrder is the order a Summary's states are told in.
var summaryOrder = []State{StateDelivered, StateFailed, StateRetrying, StateRunning, StatePending}

// String tells s in words, such as "2 delivered, 1 retrying", or "" when
// empty.
func (s Summary) String() string {
	out := ""
	for _, st := range summaryOrder {
		if n := s[st]; n > 0 {
			if out != "" {
				out += ", "
			}
			out += fmt.Sprintf("%d %s", n, st)
		}
	}
	return out
}
