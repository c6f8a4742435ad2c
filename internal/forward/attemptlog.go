package forward

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hookgate/hookgate/internal/store"
)

// maxAttemptBatch bounds the attempts one round trip records.
const maxAttemptBatch = 256

// attemptWriteTimeout bounds one write of the attempt log.
const attemptWriteTimeout = 10 * time.Second

// attemptLog records the worker's attempts with their answers, many in one
// round trip. The attempts that come in while a write is under way wait
// for the next write, which the goroutine that made the first one makes:
// the others only queue theirs and go on. So under load the workers share
// round trips, and no attempt waits for a timer; there is no goroutine to
// stop, and none is left with attempts to write when the workers are
// done. A failed write is logged: an attempt's record is its forward's
// detail, not its state.
type attemptLog struct {
	db   store.DB
	keep int
	log  *slog.Logger

	mu       sync.Mutex
	pending  []store.Attempt
	flushing bool
}

// add queues a, and writes the queue unless another goroutine is writing.
func (l *attemptLog) add(ctx context.Context, a store.Attempt) {
	l.mu.Lock()
	l.pending = append(l.pending, a)
	if l.flushing {
		l.mu.Unlock()
		return
	}
	l.flushing = true
	// Others' attempts are written too: not under this job's deadline.
	ctx = context.WithoutCancel(ctx)
	for {
		n := min(len(l.pending), maxAttemptBatch)
		batch := l.pending[:n:n]
		l.pending = l.pending[n:]
		if len(l.pending) == 0 {
			l.pending = nil
		}
		l.mu.Unlock()
		l.write(ctx, batch)
		l.mu.Lock()
		if len(l.pending) == 0 {
			l.flushing = false
			l.mu.Unlock()
			return
		}
	}
}

func (l *attemptLog) write(ctx context.Context, batch []store.Attempt) {
	ctx, cancel := context.WithTimeout(ctx, attemptWriteTimeout)
	defer cancel()
	if err := store.New(l.db).RecordAttempts(ctx, batch, l.keep); err != nil {
		l.log.Warn("record forward attempts", "count", len(batch), "err", err)
	}
}
