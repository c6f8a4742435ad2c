package dedup_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/idempotency"
	"github.com/hookgate/hookgate/internal/testing/patterntest"
)

// patternSubject adapts Store.Run to the pattern's suite (the one that
// proves the public consumer package too): the state change runs the
// suite's statements guarded by Claimed, and the response body is the
// change's marker. Every delivery of a key carries the same request body,
// as a sender's retries do.
func patternSubject(t *testing.T) patterntest.Subject {
	pool := patterntest.RacePool(t, testCtx(t))
	store := newStore(t, pool, dedup.Config{InFlightWait: 30 * time.Second}) // generous: nothing may time out under -race
	const sender = "suite"
	return patterntest.Subject{
		Pool: pool,
		Apply: func(ctx context.Context, key string, c patterntest.Change) (patterntest.Outcome, error) {
			now := time.Now().UTC()
			d := idempotency.Delivery{
				Key:           idempotency.Key{Sender: sender, DeliveryID: key},
				RequestSHA256: sha256.Sum256([]byte("the same bytes")),
				EventID:       uuid.Must(uuid.NewV7()),
				Response:      idempotency.Response{Status: http.StatusAccepted, ContentType: "text/plain", Body: []byte(c.Marker)},
				ReceivedAt:    now,
				ExpiresAt:     now.Add(time.Hour),
			}
			guard := " WHERE " + dedup.Claimed(1, 2, 3)
			res, err := store.Run(ctx, d, func(b *dedup.Batch) {
				b.Queue(`INSERT INTO pattern_marks (key, marker) SELECT $2, $4::text`+guard, sender, key, d.EventID, c.Marker)
				if c.Fail {
					b.Queue(patterntest.FailSQL)
				}
				if c.Other != "" {
					b.Queue(`INSERT INTO pattern_other (v) SELECT $4::text`+guard, sender, key, d.EventID, c.Other)
				}
			})
			return patterntest.Outcome{New: !res.Replayed, Response: string(res.Response.Body)}, err
		},
		Keys: func(ctx context.Context, key string) (int, error) {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_messages WHERE sender = $1 AND delivery_id = $2`, sender, key).Scan(&n)
			return n, err
		},
	}
}

// TestPattern runs the pattern's suite, the one that proves the public
// consumer package, on Store.Run.
func TestPattern(t *testing.T) {
	t.Parallel()
	patterntest.Run(t, patternSubject)
}
