package forward

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/testkit"
)

// Workers that record their attempts at once share round trips: every
// attempt is written, once, and fewer writes were made than attempts.
func TestAttemptLogWritesEveryAttemptOnce(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	var logged testkit.LogBuffer
	counting := &countingDB{DB: pool}
	l := &attemptLog{db: counting, keep: 20, log: slog.New(slog.NewTextHandler(&logged, nil))}
	const workers, each = 16, 40
	start := time.Now().UTC()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			event := uuid.New()
			for i := range each {
				l.add(t.Context(), store.Attempt{Sender: "acme", EventID: event, Target: "orders", StartedAt: start.Add(time.Duration(w*each+i) * time.Microsecond),
					Outcome: "retry", Cause: store.CauseRetry, Attempt: i + 1, Status: 503, Error: "target answered 503"})
			}
		})
	}
	wg.Wait()
	testkit.Poll(t, time.Minute, "the attempt log to be written", l.idle)
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM forward_attempts`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	// Each forward keeps its last 20 of its 40.
	if n != workers*20 {
		t.Errorf("%d attempts kept, want %d (20 of each of %d forwards)", n, workers*20, workers)
	}
	if logged.String() != "" {
		t.Errorf("logged: %s", logged.String())
	}
	t.Logf("%d attempts in %d writes", workers*each, counting.batches())
	if b := counting.batches(); b >= workers*each {
		t.Errorf("%d writes for %d attempts: none was shared", b, workers*each)
	}
}

// An attempt log whose write fails logs it, and the next add writes.
func TestAttemptLogLogsAFailedWrite(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	var logged testkit.LogBuffer
	l := &attemptLog{db: pool, keep: 20, log: slog.New(slog.NewTextHandler(&logged, nil))}
	ctx := t.Context()
	// An outcome the table's CHECK refuses.
	l.add(ctx, store.Attempt{Sender: "acme", EventID: uuid.New(), Target: "orders", StartedAt: time.Now(), Outcome: "lost", Cause: store.CauseFirst, Attempt: 1})
	if !strings.Contains(logged.String(), "record forward attempts") {
		t.Errorf("a failed write was not logged: %q", logged.String())
	}
	l.add(ctx, store.Attempt{Sender: "acme", EventID: uuid.New(), Target: "orders", StartedAt: time.Now(), Outcome: "delivered", Cause: store.CauseFirst, Attempt: 1, Status: 200})
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM forward_attempts`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d attempts after a failed write and a good one (%v), want 1", n, err)
	}
}

// countingDB counts the statements and batches sent through it: the
// round trips.
type countingDB struct {
	store.DB
	mu sync.Mutex
	n  int
}

func (c *countingDB) count() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *countingDB) batches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.count()
	return c.DB.Exec(ctx, sql, args...)
}

func (c *countingDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c.count()
	return c.DB.SendBatch(ctx, b)
}

// A worker that writes the queue writes one batch, its own attempt in it,
// and returns: the attempts that came in meanwhile are written by another
// goroutine. A worker used to keep writing as long as attempts kept
// coming, past its job's deadline.
func TestAttemptLogWorkerWritesOneBatch(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	g := &gatedDB{DB: pool, started: make(chan struct{}), proceed: make(chan struct{}), release: make(chan struct{})}
	l := &attemptLog{db: g, keep: 20, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	attempt := func() store.Attempt {
		return store.Attempt{Sender: "acme", EventID: uuid.New(), Target: "orders", StartedAt: time.Now(), Outcome: "delivered", Cause: store.CauseFirst, Attempt: 1, Status: 200}
	}
	returned := make(chan struct{})
	go func() {
		l.add(t.Context(), attempt())
		close(returned)
	}()
	<-g.started // the first worker's write is under way
	l.add(t.Context(), attempt())
	l.add(t.Context(), attempt())
	close(g.proceed)
	select {
	case <-returned:
	case <-time.After(time.Minute):
		t.Fatal("the first worker is still writing the others' attempts")
	}
	if l.idle() {
		t.Fatal("the others' attempts are not queued for a write")
	}
	close(g.release) // the other goroutine's write goes on
	testkit.Poll(t, time.Minute, "the others' attempts to be written", l.idle)
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM forward_attempts`).Scan(&n); err != nil || n != 3 {
		t.Errorf("%d attempts written (%v), want 3", n, err)
	}
}

// gatedDB holds the first write until proceed is closed, and the others
// until release is.
type gatedDB struct {
	store.DB
	started, proceed, release chan struct{}
	n                         atomic.Int32
}

func (g *gatedDB) wait() {
	if g.n.Add(1) == 1 {
		close(g.started)
		<-g.proceed
		return
	}
	<-g.release
}

func (g *gatedDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	g.wait()
	return g.DB.Exec(ctx, sql, args...)
}

func (g *gatedDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	g.wait()
	return g.DB.SendBatch(ctx, b)
}
