// Package patterntest is the test suite of the Idempotent Consumer pattern:
// one set of checks that proves every implementation of it in this module
// (internal/dedup at the edge, the public consumer package behind it),
// each through its own API, against a real PostgreSQL.
//
// An implementation is adapted to a Subject: Apply runs a Change for a key
// in the implementation's transaction. The suite owns two tables of its
// own in the subject's database: pattern_marks, where every applied change
// leaves a row (so a change applied twice shows), and pattern_other, whose
// unique constraint a change can violate on purpose.
package patterntest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// Racers is how many deliveries of one key a race round runs at once.
const Racers = 50

// Tables is the DDL of the suite's own tables; Prepare runs it.
const Tables = `
CREATE TABLE IF NOT EXISTS pattern_marks (key text NOT NULL, marker text NOT NULL);
CREATE TABLE IF NOT EXISTS pattern_other (v text CONSTRAINT pattern_other_key PRIMARY KEY);`

// Change is what a subject applies for a key, in its transaction.
type Change struct {
	// Marker is inserted into pattern_marks with the key, and is the
	// response body the subject stores for the key.
	Marker string
	// Fail makes the change fail after its mark, before COMMIT (a
	// statement that errors in the database).
	Fail bool
	// Other, when not empty, is inserted into pattern_other after the
	// mark: a unique violation of another constraint when it is there.
	Other string
}

// The statements of a Change, for subjects that run SQL on a transaction
// (guard them as the subject requires): MarkSQL takes the key and Marker,
// FailSQL nothing, OtherSQL takes Other.
const (
	MarkSQL  = `INSERT INTO pattern_marks (key, marker) VALUES ($1, $2)`
	FailSQL  = `SELECT 1 / 0`
	OtherSQL = `INSERT INTO pattern_other (v) VALUES ($1)`
)

// Outcome is what a subject answered for one Apply.
type Outcome struct {
	// New is true when this call applied the change; false when it
	// answered a duplicate with the stored response.
	New bool
	// Response is the stored response's body: the marker of the change that
	// was applied for the key.
	Response string
}

// Subject is an implementation of the pattern under test.
type Subject struct {
	// Pool is the subject's database: its own schema and Tables applied,
	// able to hold Racers connections at once (see RacePool).
	Pool *pgxpool.Pool
	// Apply applies c for key at most once, in one transaction with the
	// claim of key, and answers with the outcome. Any error but a
	// duplicate is returned as an error.
	Apply func(ctx context.Context, key string, c Change) (Outcome, error)
	// Keys counts the subject's key rows for key (0 or 1 when correct).
	Keys func(ctx context.Context, key string) (int, error)
}

// bigPools lets one test at a time in this process hold a pool of about
// Racers connections, so that parallel tests stay within the server's
// max_connections.
var bigPools = make(chan struct{}, 1)

// RacePool returns the pool of a database of the test's own (pgtest.NewDB,
// migrated) able to hold Racers connections at once, with that many already
// open, so that released goroutines do not spread out while dialling, and
// the suite's Tables made. The database and the pool go back to pgtest when
// the test ends, which hands both, the sessions cleaned, to the next
// RacePool of the process: opening Racers sessions costs the server more
// than a race.
func RacePool(t testing.TB, ctx context.Context) *pgxpool.Pool {
	t.Helper()
	select {
	case bigPools <- struct{}{}:
	case <-ctx.Done():
		t.Fatal("waiting for another racing test to release its connections:", ctx.Err())
	}
	t.Cleanup(func() { <-bigPools }) // after pgtest's cleanups: cleanups run last-in first-out
	pool, _ := pgtest.NewDB(t, pgtest.Conns(Racers))
	conns := make([]*pgxpool.Conn, Racers)
	errs := make([]error, Racers)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() { conns[i], errs[i] = pool.Acquire(ctx) })
	}
	wg.Wait()
	for i, c := range conns {
		if errs[i] != nil {
			t.Fatalf("open connection %d: %v", i, errs[i])
		}
		c.Release()
	}
	if _, err := pool.Exec(ctx, Tables); err != nil {
		t.Fatal("create the suite's tables:", err)
	}
	return pool
}

// Run runs every check of the suite on the subject that newSubject
// returns, each in a subtest with a subject of its own.
func Run(t *testing.T, newSubject func(t *testing.T) Subject) {
	checks := []struct {
		name string
		run  func(t *testing.T, ctx context.Context, s Subject)
	}{
		{"FirstDeliveryThenReplay", firstThenReplay},
		{"ConcurrentDuplicates", concurrentDuplicates},
		{"FailureBeforeCommitLeavesNothing", failureBeforeCommit},
		{"ResponseLostAfterCommitIsReplayed", responseLostAfterCommit},
		{"OtherConstraintIsNotADuplicate", otherConstraint},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c.run(t, ctx, newSubject(t))
		})
	}
}

func marks(t *testing.T, ctx context.Context, s Subject, key string) int {
	t.Helper()
	var n int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM pattern_marks WHERE key = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func keys(t *testing.T, ctx context.Context, s Subject, key string) int {
	t.Helper()
	n, err := s.Keys(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// firstThenReplay: a first delivery applies the change; a second one with
// another change answers the first's stored response and applies nothing.
func firstThenReplay(t *testing.T, ctx context.Context, s Subject) {
	first, err := s.Apply(ctx, "k1", Change{Marker: "first"})
	if err != nil || !first.New || first.Response != "first" {
		t.Fatalf("first delivery: %+v, %v; want new with response first", first, err)
	}
	again, err := s.Apply(ctx, "k1", Change{Marker: "second"})
	if err != nil || again.New || again.Response != "first" {
		t.Fatalf("second delivery: %+v, %v; want a duplicate answering first", again, err)
	}
	if n := marks(t, ctx, s, "k1"); n != 1 {
		t.Fatalf("the change was applied %d times, want 1", n)
	}
}

// Attempt is one racing delivery and its outcome.
type Attempt struct {
	Marker  string
	Outcome Outcome
	Err     error
}

// Race applies Racers changes for key at once through apply: every
// goroutine is started and parked on a barrier, which is then opened for
// all of them together. Change i has marker "<key>/<i>".
func Race(ctx context.Context, key string, apply func(ctx context.Context, key string, c Change) (Outcome, error)) []Attempt {
	attempts := make([]Attempt, Racers)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	ready.Add(len(attempts))
	for i := range attempts {
		a := &attempts[i]
		a.Marker = fmt.Sprintf("%s/%d", key, i)
		done.Go(func() {
			ready.Done()
			<-start
			a.Outcome, a.Err = apply(ctx, key, Change{Marker: a.Marker})
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	return attempts
}

// Violations checks one race on key against the guarantee and returns
// every violation found: exactly one mark and one key row, every call a
// success, exactly one new, and every call answering the winner's marker.
func Violations(t *testing.T, ctx context.Context, s Subject, key string, attempts []Attempt) []string {
	t.Helper()
	var v []string
	if n := marks(t, ctx, s, key); n != 1 {
		v = append(v, fmt.Sprintf("the change was applied %d times, want 1", n))
	}
	if n := keys(t, ctx, s, key); n != 1 {
		v = append(v, fmt.Sprintf("%d key rows, want 1", n))
	}
	winner, news := "", 0
	for _, a := range attempts {
		if a.Err != nil {
			v = append(v, fmt.Sprintf("%s: error %v", a.Marker, a.Err))
			continue
		}
		if a.Outcome.New {
			news++
			winner = a.Marker
		}
	}
	if news != 1 {
		v = append(v, fmt.Sprintf("%d calls answered new, want 1", news))
	}
	for _, a := range attempts {
		if a.Err == nil && a.Outcome.Response != winner {
			v = append(v, fmt.Sprintf("%s answered %q, want the winner's %q", a.Marker, a.Outcome.Response, winner))
		}
	}
	return v
}

// concurrentDuplicates races Racers deliveries of one key, five rounds.
func concurrentDuplicates(t *testing.T, ctx context.Context, s Subject) {
	for round := 1; round <= 5; round++ {
		key := fmt.Sprintf("race-%d", round)
		if v := Violations(t, ctx, s, key, Race(ctx, key, s.Apply)); len(v) > 0 {
			t.Fatalf("round %d:\n%s", round, strings.Join(v, "\n"))
		}
	}
}

// failureBeforeCommit: a change that fails before COMMIT returns an error
// (never a duplicate), leaves neither the key nor the change, and the same
// key is then accepted as new.
func failureBeforeCommit(t *testing.T, ctx context.Context, s Subject) {
	out, err := s.Apply(ctx, "k-fail", Change{Marker: "failing", Fail: true})
	if err == nil {
		t.Fatalf("a failing change answered %+v, want an error", out)
	}
	if n := marks(t, ctx, s, "k-fail"); n != 0 {
		t.Fatalf("a failed change left %d marks", n)
	}
	if n := keys(t, ctx, s, "k-fail"); n != 0 {
		t.Fatalf("a failed change left %d key rows: the key is consumed", n)
	}
	out, err = s.Apply(ctx, "k-fail", Change{Marker: "retry"})
	if err != nil || !out.New || out.Response != "retry" {
		t.Fatalf("the retry after a failure: %+v, %v; want new", out, err)
	}
}

// responseLostAfterCommit: the outcome of a committed delivery is lost on
// its way to the sender (its result is dropped); the sender's retry gets
// the stored response and applies nothing.
func responseLostAfterCommit(t *testing.T, ctx context.Context, s Subject) {
	if _, err := s.Apply(ctx, "k-lost", Change{Marker: "committed"}); err != nil {
		t.Fatal(err)
	}
	// The answer never reached the sender, which retries.
	out, err := s.Apply(ctx, "k-lost", Change{Marker: "retry"})
	if err != nil || out.New || out.Response != "committed" {
		t.Fatalf("the retry: %+v, %v; want a duplicate answering committed", out, err)
	}
	if n := marks(t, ctx, s, "k-lost"); n != 1 {
		t.Fatalf("the change was applied %d times, want 1", n)
	}
}

// otherConstraint: a unique violation of another constraint in the change
// is an error, not a duplicate; nothing is recorded and the key is new
// afterwards.
func otherConstraint(t *testing.T, ctx context.Context, s Subject) {
	if _, err := s.Pool.Exec(ctx, `INSERT INTO pattern_other (v) VALUES ('taken')`); err != nil {
		t.Fatal(err)
	}
	out, err := s.Apply(ctx, "k-other", Change{Marker: "violating", Other: "taken"})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UniqueViolation || pgErr.ConstraintName != "pattern_other_key" {
		t.Fatalf("another constraint's violation answered %+v, %v; want that unique violation as the error", out, err)
	}
	if n := keys(t, ctx, s, "k-other"); n != 0 {
		t.Fatalf("the failed delivery left %d key rows", n)
	}
	out, err = s.Apply(ctx, "k-other", Change{Marker: "retry"})
	if err != nil || !out.New {
		t.Fatalf("the retry: %+v, %v; want new", out, err)
	}
}

// Naive is the broken pattern the suite exists to catch: a pre-check, then
// the change, then the key insert with ON CONFLICT DO NOTHING, each in its
// own transaction, on table pattern_naive_keys. It is the negative control
// of the race harness.
func Naive(pool *pgxpool.Pool) Subject {
	return Subject{
		Pool: pool,
		Apply: func(ctx context.Context, key string, c Change) (Outcome, error) {
			var stored *string
			err := pool.QueryRow(ctx, `SELECT (SELECT response FROM pattern_naive_keys WHERE key = $1)`, key).Scan(&stored)
			if err != nil {
				return Outcome{}, err
			}
			if stored != nil {
				return Outcome{Response: *stored}, nil
			}
			if _, err := pool.Exec(ctx, `INSERT INTO pattern_marks (key, marker) VALUES ($1, $2)`, key, c.Marker); err != nil {
				return Outcome{}, err
			}
			_, err = pool.Exec(ctx, `INSERT INTO pattern_naive_keys (key, response) VALUES ($1, $2) ON CONFLICT DO NOTHING`, key, c.Marker)
			return Outcome{New: true, Response: c.Marker}, err
		},
		Keys: func(ctx context.Context, key string) (int, error) {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pattern_naive_keys WHERE key = $1`, key).Scan(&n)
			return n, err
		},
	}
}

// DetectsNaive runs Naive through the race harness until a round applies
// a change twice, and fails the test when none does in 50 rounds: proof
// that the harness races and its checks catch duplicates.
func DetectsNaive(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	s := Naive(pool)
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS pattern_naive_keys (key text PRIMARY KEY, response text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const maxRounds = 50
	for round := 1; round <= maxRounds; round++ {
		key := fmt.Sprintf("naive-%d", round)
		attempts := Race(ctx, key, s.Apply)
		if n := marks(t, ctx, s, key); n > 1 {
			v := Violations(t, ctx, s, key, attempts)
			if len(v) == 0 {
				t.Fatalf("round %d applied the change %d times, but Violations reported nothing", round, n)
			}
			t.Logf("round %d: the naive implementation applied the change %d times; the checks reported:\n%s", round, n, strings.Join(v, "\n"))
			return
		}
	}
	t.Fatalf("in %d rounds of %d concurrent deliveries, the naive implementation never applied a change twice: the harness does not race", maxRounds, Racers)
}
