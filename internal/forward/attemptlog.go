package forward

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hookgate/hookgate/internal/store"
)

const (
	// maxAttemptBatch bounds the attempts one round trip records.
	maxAttemptBatch = 256
	// maxAttemptsPending bounds the attempts waiting to be written: when
	// PostgreSQL is slower than the workers, the others are dropped, and
	// logged.
	maxAttemptsPending = 2_000
	// attemptWriteTimeout bounds one write of the attempt log.
	attemptWriteTimeout = 10 * time.Second
)

// attemptLog records the worker's attempts with their answers, many in one
// round trip. The attempts that come in while a write is under way wait
// for the next one. A worker whose attempt finds no write under way
// writes the queue, its own attempt with it, once; what came in meanwhile
// is written by a goroutine of its own, which ends once the queue is
// empty. So a worker never writes more than one batch, and under load the
// workers share round trips without waiting for a timer. A failed write
// is logged: an attempt's record is its forward's detail, not its state.
type attemptLog struct {
	db   store.DB
	keep int
	log  *slog.Logger

	mu       sync.Mutex
	pending  []store.Attempt
	flushing bool // a write is under way, or its goroutine is to come
	dropped  int  // attempts dropped since the last warning
}

// add queues a, and writes the queue unless a write is under way.
func (l *attemptLog) add(ctx context.Context, a store.Attempt) {
	l.mu.Lock()
	if len(l.pending) >= maxAttemptsPending {
		l.dropped++
		n := l.dropped
		l.mu.Unlock()
		if n == 1 || n%1000 == 0 {
			l.log.Warn("forward attempts dropped: PostgreSQL does not keep up with their records", "dropped", n)
		}
		return
	}
	l.pending = append(l.pending, a)
	if l.flushing {
		l.mu.Unlock()
		return
	}
	l.flushing = true
	batch := l.take()
	l.mu.Unlock()
	// Others' attempts are written too: not under this job's deadline.
	ctx = context.WithoutCancel(ctx)
	l.write(ctx, batch)
	l.mu.Lock()
	if len(l.pending) == 0 {
		l.flushing = false
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	go l.drain(ctx)
}

// drain writes the queue until it is empty; the flag is set meanwhile.
func (l *attemptLog) drain(ctx context.Context) {
	l.mu.Lock()
	for len(l.pending) > 0 {
		batch := l.take()
		l.mu.Unlock()
		l.write(ctx, batch)
		l.mu.Lock()
	}
	l.flushing = false
	l.mu.Unlock()
}

// take removes a batch from the queue; l.mu is held.
func (l *attemptLog) take() []store.Attempt {
	n := min(len(l.pending), maxAttemptBatch)
	batch := l.pending[:n:n]
	if l.pending = l.pending[n:]; len(l.pending) == 0 {
		l.pending = nil
	}
	return batch
}

func (l *attemptLog) write(ctx context.Context, batch []store.Attempt) {
	ctx, cancel := context.WithTimeout(ctx, attemptWriteTimeout)
	defer cancel()
	if err := store.New(l.db).RecordAttempts(ctx, batch, l.keep); err != nil {
		l.log.Warn("record forward attempts", "count", len(batch), "err", err)
	}
}

// idle reports whether every attempt added has been written (or dropped).
func (l *attemptLog) idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.flushing && len(l.pending) == 0
}
