package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// forward_processes holds the processes that work forwards, by River
// client ID, with the time each last said it was alive. A running job whose
// last attempt was made by a process with no recent row belongs to a dead
// process. Package queue makes such jobs available again.

// heartbeatSQL writes the row of process $1 (started at $2): seen now.
const heartbeatSQL = `INSERT INTO forward_processes (id, started_at, seen_at) VALUES ($1, $2, statement_timestamp())
ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at`

// forgetProcessesSQL deletes the rows of processes not seen for $1
// milliseconds. They died long ago, and their jobs were taken over. A row
// that another transaction is writing is skipped: its process is alive.
// After an outage longer than $1, processes that come back together each
// find the others' rows stale while holding their own; waiting for them,
// each would wait for the other.
const forgetProcessesSQL = `DELETE FROM forward_processes WHERE id IN (
  SELECT id FROM forward_processes WHERE seen_at < statement_timestamp() - $1 * interval '1 millisecond' FOR UPDATE SKIP LOCKED)`

// Heartbeat records that the process id (a River client ID), started at
// startedAt, is alive now, and forgets the processes not seen for forget
// (when positive), in one round trip.
func (q *Queries) Heartbeat(ctx context.Context, id string, startedAt time.Time, forget time.Duration) error {
	var b pgx.Batch
	b.Queue(heartbeatSQL, id, startedAt)
	if forget > 0 {
		b.Queue(forgetProcessesSQL, forget.Milliseconds())
	}
	if err := q.db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("write the heartbeat of process %s: %w", id, err)
	}
	return nil
}

// RemoveProcess deletes the row of process id (it is stopping): whatever
// it leaves running can be taken over at once.
func (q *Queries) RemoveProcess(ctx context.Context, id string) error {
	if _, err := q.db.Exec(ctx, `DELETE FROM forward_processes WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete the row of process %s: %w", id, err)
	}
	return nil
}

// Process is a row of forward_processes.
type Process struct {
	ID                string
	StartedAt, SeenAt time.Time
}

// Processes returns the processes that said they were alive, newest first.
func (q *Queries) Processes(ctx context.Context) ([]Process, error) {
	rows, err := q.db.Query(ctx, `SELECT id, started_at, seen_at FROM forward_processes ORDER BY started_at DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Process, error) {
		var p Process
		return p, row.Scan(&p.ID, &p.StartedAt, &p.SeenAt)
	})
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	return out, nil
}
