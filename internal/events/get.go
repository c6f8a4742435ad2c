package events

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrNotFound means no event with the ID is stored.
var ErrNotFound = errors.New("events: no such event")

// Querier is what Get needs of a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// getSQL finds an event by its ID alone, with the index webhook_events_id_idx
// (migration 4): the primary key leads with sender.
const getSQL = `SELECT sender, delivery_id, received_at, headers, body, event_type FROM webhook_events WHERE id = $1 LIMIT 1`

// Get returns the stored event with the given ID: its event type ("" when
// it had none, and for events stored before event types), its headers as stored
// (never nil) and its body (empty, not nil, when the request had none). It
// returns an error wrapping ErrNotFound when no such event is stored. Event
// IDs are UUIDv7 that hookgate generates, so at most one sender has an event
// with a given ID.
func Get(ctx context.Context, db Querier, id uuid.UUID) (Event, error) {
	e := Event{ID: id}
	var headers map[string][]string
	err := db.QueryRow(ctx, getSQL, id).Scan(&e.Sender, &e.DeliveryID, &e.ReceivedAt, &headers, &e.Body, &e.EventType)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, fmt.Errorf("get event %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Event{}, fmt.Errorf("get event %s: %w", id, err)
	}
	e.Headers = http.Header(headers)
	if e.Headers == nil {
		e.Headers = http.Header{}
	}
	if e.Body == nil {
		e.Body = []byte{}
	}
	return e, nil
}
