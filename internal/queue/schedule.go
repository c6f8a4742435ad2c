package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookgate/hookgate/internal/store"
)

// Hookgate makes its forward jobs available itself when their time comes,
// instead of leaving them to River's job scheduler (issue 43).
//
// River's fetch takes available jobs alone, once their scheduled_at has
// come. A forward snoozed for longer than River's scheduler interval (5 s:
// behind an open breaker, or paused by a Retry-After) is written
// scheduled, and a retry due later than that retryable; River's scheduler,
// which runs every 5 s in the elected leader, makes them available once
// they are due within its interval. Its statement (JobSchedule) locks the
// due jobs (FOR UPDATE, without SKIP LOCKED), then checks each against the
// others for a unique-key conflict; on statistics that say no job is
// scheduled (after a crash, or after an outage filled the table with
// snoozed forwards that the last ANALYZE did not see) PostgreSQL plans that
// check as a nested loop over the due jobs for each due job: 1,000 / 2,000
// / 4,000 due jobs took 1.8 / 7.0 / 25 s, against 48–146 ms after ANALYZE,
// and 10,000 run into River's 30 s timeout, after which it rolls back and
// starts again five seconds later, holding the same locks. A target's
// forwards then came back a minute after the target did.
//
// So each process that works forwards makes its forwards available itself,
// every ScheduleEvery (and once before River starts): the forward jobs
// scheduled or retryable whose time comes within scheduleAhead, in batches
// of scheduleBatch, keeping their scheduled_at (River's fetch takes them
// when it comes, as it does the short snoozes and retries River's executor
// leaves available). scheduleAhead is longer than River's scheduler's own
// look-ahead (its interval), so River's scheduler finds no forward due that
// this has not made available already, and its plan no longer matters to
// them. The statement needs no unique-key check: a forward's unique states
// hold every state of an unfinished job, so it stays in River's unique
// index (staysUnique leaves any other job to River's scheduler). It takes
// its jobs with FOR UPDATE SKIP LOCKED, so it never waits for a lock (see
// the lock order, doc.go).
//
// River's scheduler still runs, for the other job kinds. Should its
// statement hold forwards anyway (a process's first seconds, a forward
// snoozed just over 5 s, jobs a test or an operator wrote), a process that
// sees it run for longer than riverScheduleStall (it looks every
// watchEvery) cancels it (pg_cancel_backend), which releases the jobs to
// the next pass at once, and runs ANALYZE river_job, so that River plans
// its next run, five seconds later, on true figures. And after PostgreSQL
// has lost its activity statistics (a crash, pg_stat_reset), when
// autovacuum would not analyze the table for a long time, the first
// process to look analyzes it (analyzeCheckEvery).

// Settings of the scheduling of forward jobs.
const (
	// ScheduleEvery is how often a working process makes its due forward
	// jobs available (an indexed query that finds none most of the time).
	ScheduleEvery = 250 * time.Millisecond
	// scheduleAhead is how far ahead it looks: River's scheduler looks one
	// interval ahead, and runs at most that often, so a forward due within
	// scheduleAhead was made available before River's scheduler saw it.
	scheduleAhead = riverSchedulerInterval + 2*time.Second
	// scheduleBatch is the most jobs one statement makes available; a
	// pass runs statements until one makes fewer available.
	scheduleBatch = 1000
	// riverScheduleStall is how long River's scheduler statement may run
	// before hookgate cancels it and analyzes River's table: planned on
	// true figures it takes milliseconds (10,000 due jobs beside 300,000
	// finished ones: 0.6 s on a test machine).
	riverScheduleStall = 3 * time.Second
	// watchEvery is how often a process looks for a stalled statement of
	// River's scheduler (in pg_stat_activity).
	watchEvery = time.Second
	// analyzeCheckEvery is how often a process checks whether River's
	// table was analyzed since PostgreSQL's activity statistics were last
	// reset.
	analyzeCheckEvery = 30 * time.Second
)

// scheduleSQL makes available (River's state $2) up to $6 forward jobs on
// queue $1 in River's states $3 (scheduled, retryable) whose time comes
// within $5 milliseconds, of priority $4, keeping their scheduled_at: the
// jobs are selected, locked (SKIP LOCKED: a job another transaction holds
// is left for the next pass) and made available in one statement. The
// InitPlan reads River's fetching index in its order (state, queue,
// priority, scheduled_at, id: under store.IndexOrderScans the one path
// without a disabled node, see plans.go), from the earliest due, and stops
// after $6 jobs or at the first not due; the update finds them by ctid.
var scheduleSQL = jobSQL(`UPDATE river_job SET state = $2::river_job_state
WHERE ctid = ANY(ARRAY(SELECT ctid FROM river_job
  WHERE state = ANY($3::river_job_state[]) AND queue = $1 AND priority = $4
    AND scheduled_at <= now() + $5 * interval '1 millisecond'
    AND kind = {forward_kind} AND ` + staysUnique(2) + `
  ORDER BY state, queue, priority, scheduled_at, id LIMIT $6 FOR UPDATE SKIP LOCKED))`)

// scheduleArgs are scheduleSQL's arguments.
func scheduleArgs(queue string, ahead time.Duration, limit int) []any {
	return []any{queue, jobAvailable, []string{jobScheduled, jobRetryable}, forwardPriority, ahead.Milliseconds(), limit}
}

// ScheduleDueForwards makes available up to limit forward jobs on queue
// that River holds scheduled or retryable and whose time comes within
// ahead, keeping their time (River's fetch takes them when it comes), and
// returns how many it made available. It never waits for a job another
// transaction holds (see scheduleSQL).
func (q *Jobs) ScheduleDueForwards(ctx context.Context, queue string, ahead time.Duration, limit int) (int64, error) {
	n, err := execUnder(ctx, q.db, store.IndexOrderScans, scheduleSQL, scheduleArgs(queue, ahead, limit)...)
	if err != nil {
		return 0, fmt.Errorf("make the due forwards available: %w", err)
	}
	return n, nil
}

// riverScheduleStatement starts the text of River's scheduler statement as
// River's driver sends it (sqlc's name comment): how hookgate finds it in
// pg_stat_activity. TestRiverPlansWhenStatisticsLie checks that River
// still sends it so.
const riverScheduleStatement = "-- name: JobSchedule "

// stalledScheduleSQL returns the server processes of this database running
// River's scheduler statement for longer than $1 milliseconds, and how
// long each has.
const stalledScheduleSQL = `SELECT pid, (extract(epoch FROM statement_timestamp() - query_start) * 1000)::bigint
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'
  AND starts_with(query, $2) AND query_start < statement_timestamp() - $1 * interval '1 millisecond'`

// CancelStalledRiverSchedule cancels River's scheduler statements that
// have run for longer than stall, then analyzes River's table, so that
// River plans its next run on true figures (the cached plan of its
// prepared statement is dropped with the old ones), and returns how many
// it cancelled and how long the longest had run (see the top of this
// file). A statement of a role this one may not see or signal is left
// alone.
func (q *Jobs) CancelStalledRiverSchedule(ctx context.Context, stall time.Duration) (int, time.Duration, error) {
	rows, err := q.db.Query(ctx, stalledScheduleSQL, stall.Milliseconds(), riverScheduleStatement)
	if err != nil {
		return 0, 0, fmt.Errorf("look for River's scheduler: %w", err)
	}
	type stalled struct{ pid, ms int64 }
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stalled, error) {
		var s stalled
		return s, row.Scan(&s.pid, &s.ms)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("look for River's scheduler: %w", err)
	}
	var n int
	var longest time.Duration
	for _, s := range found {
		var ok bool
		if err := q.db.QueryRow(ctx, `SELECT pg_cancel_backend($1::int)`, s.pid).Scan(&ok); err != nil {
			return n, longest, fmt.Errorf("cancel River's scheduler statement: %w", err)
		}
		if ok {
			n++
			longest = max(longest, time.Duration(s.ms)*time.Millisecond)
		}
	}
	if n > 0 {
		if _, err := q.AnalyzeJobsOnce(ctx); err != nil {
			return n, longest, err
		}
	}
	return n, longest, nil
}

// analyzeLock is the advisory lock (the two-key form, see redelivery.go)
// under which one process at a time analyzes River's table: the bytes
// "hkan", and 0.
const analyzeLock int32 = 0x686b616e

// AnalyzeJobsOnce runs ANALYZE river_job unless another process is
// analyzing it through this function (it then returns false at once): in
// a transaction holding the advisory lock analyzeLock, waiting at most
// 10 s for the table's lock (autovacuum gives it up to an ANALYZE that
// waits for it). q must not be on a transaction.
func (q *Jobs) AnalyzeJobsOnce(ctx context.Context) (bool, error) {
	tx, err := q.db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("analyze the jobs: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1::int4, 0)`, analyzeLock).Scan(&ok); err != nil {
		return false, fmt.Errorf("analyze the jobs: %w", err)
	}
	if !ok {
		return false, nil
	}
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
		return false, fmt.Errorf("analyze the jobs: %w", err)
	}
	if _, err := tx.Exec(ctx, `ANALYZE river_job`); err != nil {
		return false, fmt.Errorf("analyze the jobs: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("analyze the jobs: %w", err)
	}
	return true, nil
}

// JobsAnalyzedSinceReset reports whether River's table has been analyzed
// (by ANALYZE or autovacuum) since PostgreSQL's activity statistics were
// last reset: they are lost in a crash, and with them autovacuum's count
// of the changes since the last ANALYZE, so that it would not analyze the
// table again for a long time.
func (q *Jobs) JobsAnalyzedSinceReset(ctx context.Context) (bool, error) {
	var ok bool
	err := q.db.QueryRow(ctx, `SELECT pg_stat_get_last_analyze_time(c.oid) IS NOT NULL OR pg_stat_get_last_autoanalyze_time(c.oid) IS NOT NULL
FROM pg_class c WHERE c.oid = 'river_job'::regclass`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read when the jobs were analyzed: %w", err)
	}
	return ok, nil
}

// forwardScheduler is a working process's scheduling of its forward jobs
// (see the top of this file): run by River.Start until River.Stop.
type forwardScheduler struct {
	jobs  *Jobs
	queue string
	log   *slog.Logger

	// failing: the last pass failed (logged once until one succeeds).
	failing bool
	// watched is when River's scheduler was last looked at (watchEvery),
	// checked when the statistics were (analyzeCheckEvery).
	watched, checked time.Time

	// retention is River's for finished jobs: the counts of failed
	// forwards of the hours before it (and one more) are deleted. folded
	// is when the failed forwards were last folded into their counts
	// (foldEvery, failed.go), expired when old counts were last deleted
	// (expireEvery); foldFailing: the last fold failed (logged once until
	// one succeeds).
	retention       time.Duration
	folded, expired time.Time
	foldFailing     bool
}

// fold folds the failed forwards into their counts, every foldEvery, and
// deletes the counts River's retention has passed, every expireEvery. A
// failure is logged once until a fold succeeds again: the counts then
// read the failures not folded (failed.go).
func (s *forwardScheduler) fold(ctx context.Context) {
	if time.Since(s.folded) < foldEvery {
		return
	}
	s.folded = time.Now()
	var expire time.Time
	if s.retention > 0 && time.Since(s.expired) >= expireEvery {
		expire = time.Now().Add(-s.retention - time.Hour)
	}
	_, ran, err := s.jobs.FoldFailedForwards(ctx, foldBatch, expire)
	switch {
	case err != nil && ctx.Err() == nil && !s.foldFailing:
		s.foldFailing = true
		s.log.Warn("folding the failed forwards into their counts failed; the counts read them one by one meanwhile, tried again every "+foldEvery.String(), "err", err)
	case err == nil && s.foldFailing:
		s.foldFailing = false
		s.log.Info("folding the failed forwards into their counts works again")
	}
	if err == nil && ran && !expire.IsZero() {
		s.expired = time.Now()
	}
}

// schedule makes the due forwards available, a batch at a time, and
// returns how many.
func (s *forwardScheduler) schedule(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, err := s.jobs.ScheduleDueForwards(ctx, s.queue, scheduleAhead, scheduleBatch)
		total += n
		if err != nil || n < scheduleBatch {
			return total, err
		}
	}
}

// pass makes the due forwards available, folds the failed forwards into
// their counts (fold), cancels a stalled run of River's scheduler, and
// analyzes River's table when its statistics were reset; it returns how
// many forwards it made available.
func (s *forwardScheduler) pass(ctx context.Context) (int64, error) {
	total, err := s.schedule(ctx)
	if err != nil {
		return total, err
	}
	s.fold(ctx)
	if time.Since(s.watched) >= watchEvery {
		s.watched = time.Now()
		n, longest, err := s.jobs.CancelStalledRiverSchedule(ctx, riverScheduleStall)
		if n > 0 {
			s.log.Warn("River's job scheduler ran for too long (planned on statistics of river_job that no longer held): cancelled the statement and analyzed river_job; hookgate makes the due forwards available itself",
				"statements", n, "ran_for", longest.Round(time.Millisecond))
		}
		if err != nil {
			return total, err
		}
	}
	if time.Since(s.checked) >= analyzeCheckEvery {
		ok, err := s.jobs.JobsAnalyzedSinceReset(ctx)
		if err != nil {
			return total, err
		}
		s.checked = time.Now()
		if !ok {
			if done, err := s.jobs.AnalyzeJobsOnce(ctx); err != nil {
				return total, err
			} else if done {
				s.log.Info("analyzed river_job: PostgreSQL had lost its activity statistics (a crash, or pg_stat_reset), and autovacuum would not analyze it for a long time")
			}
		}
	}
	return total, nil
}

// run passes every ScheduleEvery until ctx is done. A failure is logged
// once until a pass succeeds again.
func (s *forwardScheduler) run(ctx context.Context) {
	tick := time.NewTicker(ScheduleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := s.pass(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !s.failing:
			s.failing = true
			s.log.Warn("making due forwards available failed; River's scheduler does it meanwhile, tried again every "+ScheduleEvery.String(), "err", err)
		case err == nil && s.failing:
			s.failing = false
			s.log.Info("making due forwards available works again")
		}
	}
}

// start makes the due forwards available once (before River's client
// starts, so that River's scheduler finds no due forward), then runs the
// loop until the returned stop is called (once; later calls do nothing).
func (s *forwardScheduler) start(ctx context.Context) (stop func()) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := s.schedule(pctx); err != nil && !errors.Is(err, context.Canceled) {
		s.failing = true
		s.log.Warn("making due forwards available failed; River's scheduler does it meanwhile, tried again every "+ScheduleEvery.String(), "err", err)
	}
	cancel()
	rctx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(rctx)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancelRun()
			<-done
		})
	}
}
