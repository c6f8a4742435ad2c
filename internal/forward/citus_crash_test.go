package forward_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/pgarray"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/testing/pgtest"
)

// EnvCitusCrash names the environment variable that runs
// TestCitusCoordinatorCrashLosesNoForward (make test-citus sets it for a
// run of its own, after the other tests: the test restarts the
// coordinator under whatever else runs on it).
const EnvCitusCrash = "HOOKGATE_TEST_CITUS_CRASH"

// TestCitusCoordinatorCrashLosesNoForward kills the Citus coordinator
// between the worker's commit and its own, in the transaction that takes a
// forward's outbox row and writes its record: the fast path's recording of
// a delivered first attempt, and the relay's move of a row into a River
// job. Without two-phase commit Citus commits the worker (the outbox row,
// distributed by sender) in its pre-commit step and the coordinator (River's
// table and forward_delivered, local tables) after; gdb stops the
// coordinator's backend after Citus sent the workers' COMMIT
// (CoordinatedRemoteTransactionsCommit) and before its own commit record
// (PreCommit_Notify, the last step before it), and kills it: the
// coordinator restarts and recovers without the transaction's local part.
//
// The deleting form (PostgreSQL's, one atomic statement there) loses the
// forward: no outbox row, no record — the test checks that, so that it
// knows its fault hits the window. The split form, which serve runs on
// Citus, leaves the outbox row marked recorded and no record; once the
// row's grace has passed the relay moves it into a River job: the forward
// is still queued, never lost. The fast path's recording has no control:
// Citus refuses its deleting form at planning (the key advance updates by
// ctid), so the relay's control alone shows that the fault hits the
// window.
func TestCitusCoordinatorCrashLosesNoForward(t *testing.T) {
	if !pgtest.Citus() {
		t.Skip("on Citus only (make test-citus): PostgreSQL commits the transaction atomically")
	}
	if os.Getenv(EnvCitusCrash) == "" {
		t.Skip("restarts the Citus coordinator under every other test that uses it: make test-citus runs it alone (" + EnvCitusCrash + "=1)")
	}
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		t.Skip("needs gdb, to stop the coordinator's backend between the two commits (apt-get install gdb)")
	}
	if os.Geteuid() != 0 {
		t.Skip("attaching gdb to the coordinator's backend (the postgres user's process) needs root")
	}
	for _, path := range []string{"fast path recording", "relay"} {
		for _, split := range []bool{false, true} {
			form := map[bool]string{false: "deleting form (control)", true: "split form"}[split]
			t.Run(path+"/"+form, func(t *testing.T) {
				if path == "fast path recording" && !split {
					t.Skip("Citus refuses the deleting form of the recording at planning (its key advance updates by ctid, which Citus refuses in a modification it plans in parts): it cannot run there")
				}
				testCoordinatorCrash(t, gdb, path, split)
			})
		}
	}
}

func testCoordinatorCrash(t *testing.T, gdb, path string, split bool) {
	e := newEnv(t, twoTargets, envOpts{Split: split})
	ctx := t.Context()

	// One connection, in exec mode: pgx prepares nothing in round trips of
	// its own, so that the first transaction to commit with a worker is the
	// one under test.
	cfg, err := pgxpool.ParseConfig(e.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = 1, 0
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	// Exec mode names the parameters' types from their Go types alone.
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error { pgarray.Register(c.TypeMap()); return nil }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var pid int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// The relay's first round also looks for senders the configuration
	// does not name (a read of every shard, committed with the workers):
	// done before the delivery, so that its next round is a look and a take.
	relay := e.newRelayWith(0, func(rc *forward.RelayConfig) { rc.Pool, rc.Distributed = pool, split })
	if _, err := relay.Once(ctx); err != nil {
		t.Fatal(err)
	}
	events := e.deliverMany([]string{"crash-1"})
	event := uuid.MustParse(events["crash-1"])
	// The relay looks before it takes: its look (a batch of statements)
	// commits with the worker too, first.
	skip := map[string]int{"fast path recording": 0, "relay": 1}[path]
	killed := stopBetweenCommits(t, gdb, pid, skip)

	switch path {
	case "fast path recording":
		at := time.Now().UTC().Truncate(time.Microsecond)
		jobs := queue.NewJobs(pool)
		if split {
			jobs = jobs.Distributed()
		}
		var batch []queue.FirstAttempt
		for _, target := range []string{"ta", "tb"} {
			batch = append(batch, queue.FirstAttempt{Sender: "acme", EventID: event, Target: target, State: queue.StateDelivered, MaxAttempts: 5,
				AttemptedAt: at, FinalizedAt: &at, ScheduledAt: at, Output: queue.Output{Status: 204, DeliveredAt: at}})
		}
		err = jobs.RecordFirstAttempts(ctx, queue.ForwardQueue, batch)
	case "relay":
		_, err = relay.Once(ctx)
	}
	if err == nil {
		t.Fatalf("%s: no error, though its coordinator backend was killed at its commit", path)
	}
	t.Logf("%s: %v", path, err)
	<-killed
	waitCoordinator(t, e.pool)

	outbox, records := len(e.outbox()), recordsOf(t, e, event)
	t.Logf("%s after the coordinator's crash: %d outbox rows, %d records of the event's 2 forwards", path, outbox, records)
	if !split {
		if outbox != 0 || records != 0 {
			t.Fatalf("the deleting form left %d outbox rows and %d records: the fault did not hit the window between the worker's commit and the coordinator's (the test proves nothing)", outbox, records)
		}
		return
	}
	if outbox+records < 2 {
		t.Fatalf("split form: %d outbox rows and %d records of the event's 2 forwards: a forward was lost", outbox, records)
	}
	// The relay takes the marked rows once their grace has passed: every
	// forward is queued (a River job), none lost.
	time.Sleep(200 * time.Millisecond)
	if _, err := e.newRelayWith(0, func(rc *forward.RelayConfig) { rc.RecordedGrace = 100 * time.Millisecond }).Once(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(e.outbox()); n != 0 {
		t.Errorf("%d outbox rows left after the relay", n)
	}
	if got := recordsOf(t, e, event); got != 2 {
		t.Errorf("%d records of the event's 2 forwards after the relay, want 2", got)
	}
}

// recordsOf counts the records of event's forwards: River jobs and the
// fast path's delivered rows.
func recordsOf(t *testing.T, e *env, event uuid.UUID) int {
	t.Helper()
	n := 0
	for _, j := range e.jobs() {
		if j.EventID == event.String() {
			n++
		}
	}
	var delivered int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM forward_delivered WHERE sender = 'acme' AND event_id = $1`, event.String()).Scan(&delivered); err != nil {
		t.Fatal(err)
	}
	return n + delivered
}

// stopBetweenCommits attaches gdb to the coordinator's backend pid and
// kills it once Citus has committed the workers' part of a transaction
// (after skip such transactions committed whole)
// (CoordinatedRemoteTransactionsCommit) and before the backend writes its
// own commit record (PreCommit_Notify comes after the pre-commit callbacks
// and before RecordTransactionCommit). It returns once gdb is attached and
// the backend runs again; the channel is closed when gdb has killed it.
func stopBetweenCommits(t *testing.T, gdb string, pid, skip int) <-chan struct{} {
	t.Helper()
	cmd := exec.Command(gdb, "-q", "-batch", "-p", strconv.Itoa(pid),
		"-ex", "break CoordinatedRemoteTransactionsCommit", "-ex", fmt.Sprintf("ignore 1 %d", skip), "-ex", "continue",
		"-ex", "break PreCommit_Notify", "-ex", "continue",
		"-ex", "kill")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		lines    []string
		running  = make(chan struct{})
		finished = make(chan struct{})
	)
	go func() {
		defer close(finished)
		sc := bufio.NewScanner(out)
		seen := false
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if !seen && strings.HasPrefix(sc.Text(), "Breakpoint 1 at") {
				seen = true
				close(running) // the next command, continue, runs it again
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case <-running:
	case <-finished:
		t.Fatalf("gdb ended before it set its breakpoint:\n%s", strings.Join(lines, "\n"))
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("gdb did not attach within 30s")
	}
	time.Sleep(200 * time.Millisecond) // its continue
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-finished
		if !slicesContain(lines, "killed]") {
			t.Logf("gdb's output:\n%s", strings.Join(lines, "\n"))
		}
	})
	return finished
}

func slicesContain(lines []string, sub string) bool {
	for _, l := range lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// waitCoordinator waits until the coordinator accepts connections again
// after its restart, and pool has dropped its connections to the old one.
func waitCoordinator(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		var one int
		err = pool.QueryRow(ctx, `SELECT 1 FROM forward_outbox LIMIT 1`).Scan(&one)
		cancel()
		if err == nil || errors.Is(err, pgx.ErrNoRows) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal(fmt.Errorf("the coordinator did not come back within 60s: %w", err))
}
