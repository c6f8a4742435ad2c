package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
	"github.com/hookgate/hookgate/internal/testing/queuetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.M(m))
}

// fixture is a fresh database: its pool, the ingest pipeline that stores
// deliveries in it, the forwards' statements (Jobs) and the store's
// queries on it.
type fixture struct {
	*Jobs
	*store.Queries
	ingest *dedup.Store
	pool   *pgxpool.Pool
	// jobs are River's jobs, put in a state and read back.
	jobs *queuetest.Jobs
}

// newFixture returns a fixture on a fresh database, and its pool.
func newFixture(t *testing.T) (*fixture, *pgxpool.Pool) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	ingest, err := dedup.New(dedup.Config{Pool: pool, InFlightWait: dedup.DefaultInFlightWait})
	if err != nil {
		t.Fatal(err)
	}
	jobs := NewJobs(pool)
	if pgtest.Citus() { // as serve runs it there (ClientConfig.Distributed)
		jobs = jobs.Distributed()
	}
	return &fixture{Jobs: jobs, Queries: store.New(pool), ingest: ingest, pool: pool, jobs: queuetest.New(pool)}, pool
}

// unreachable is a ForwardWorker whose every target is unreachable: each
// attempt fails and is retried a minute later (as forward.Worker's would
// against a target that refuses connections), so that the tests of the
// queue's own jobs (bulk redeliveries) run beside forward jobs that stay
// unfinished.
type unreachable struct{}

func (unreachable) Work(context.Context, Job) error { return errors.New("connection refused") }
func (unreachable) Timeout(Job) time.Duration       { return 10 * time.Second }
func (unreachable) NextRetry(Job) time.Time         { return time.Now().Add(time.Minute) }
