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

// Hookgate makes its forward jobs available itself when they are due,
// instead of leaving them to River's job scheduler.
//
// River's fetch takes only available jobs. A forward snoozed for longer
// than River's scheduler interval is written scheduled, and a later retry
// retryable. River's scheduler runs every 5s in the elected leader and
// makes them available when they are due. Its statement locks the due jobs
// without SKIP LOCKED, then checks each for a unique-key conflict. On
// statistics that say no job is scheduled, PostgreSQL plans that check as
// a nested loop. Thousands of due jobs then take seconds, and 10,000 run
// into River's 30s timeout and start again, holding the same locks. This
// happens after a crash, or after an outage filled the table with snoozed
// forwards.
//
// So each working process makes its due forwards available itself, every
// [ScheduleEvery] and once before River starts. It keeps their
// scheduled_at, and River's fetch takes them when that time comes.
// scheduleAhead is longer than River's own look-ahead, so River's
// scheduler never finds a due forward, and its plan no longer matters. The
// statement needs no unique-key check; see staysUnique. It uses FOR UPDATE
// SKIP LOCKED, so it never waits for a lock.
//
// River's scheduler still runs for the other job kinds. When its statement
// runs longer than riverScheduleStall, a process cancels it and analyzes
// river_job. That releases the jobs at once, and River plans its next run
// on true figures. After PostgreSQL loses its activity statistics, as in a
// crash, autovacuum would not analyze the table for a long time. So the
// first process to notice analyzes it.

// Settings of the scheduling of forward jobs.
const (
	// ScheduleEvery is how often a working process makes its due forward
	// jobs available. Most passes are one indexed query that finds none.
	ScheduleEvery = 250 * time.Millisecond
	// scheduleAhead is how far ahead a pass looks. River's scheduler looks
	// one interval ahead, so a pass has made a forward available before
	// River's scheduler sees it.
	scheduleAhead = riverSchedulerInterval + 2*time.Second
	// scheduleBatch is the most jobs that one statement makes available.
	scheduleBatch = 1000
	// riverScheduleStall is how long River's scheduler statement may run
	// before hookgate cancels it. On true statistics it takes
	// milliseconds.
	riverScheduleStall = 3 * time.Second
	// watchEvery is how often a process looks for a stalled statement of
	// River's scheduler.
	watchEvery = time.Second
	// analyzeCheckEvery is how often a process checks whether River's
	// table was analyzed since PostgreSQL's activity statistics were last
	// reset.
	analyzeCheckEvery = 30 * time.Second
)

// scheduleSQL makes available up to $6 scheduled or retryable forward jobs
// on queue $1 that are due within $5 milliseconds. They keep their
// scheduled_at. A job that another transaction holds is left for the next
// pass. The InitPlan reads River's fetching index in its order, from the
// earliest due, and stops after $6 jobs or at the first not due.
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

// ScheduleDueForwards makes available up to limit scheduled or retryable
// forward jobs on queue that are due within ahead, and returns how many.
// They keep their time, and River's fetch takes them when it comes. It
// never waits for a job that another transaction holds.
func (q *Jobs) ScheduleDueForwards(ctx context.Context, queue string, ahead time.Duration, limit int) (int64, error) {
	n, err := execUnder(ctx, q.db, store.IndexOrderScans, scheduleSQL, scheduleArgs(queue, ahead, limit)...)
	if err != nil {
		return 0, fmt.Errorf("make the due forwards available: %w", err)
	}
	return n, nil
}

// riverScheduleStatement starts the text of River's scheduler statement,
// as River's driver sends it. Hookgate finds the statement by it in
// pg_stat_activity, and a test checks that River still sends it so.
const riverScheduleStatement = "-- name: JobSchedule "

// stalledScheduleSQL returns the server processes of this database running
// River's scheduler statement for longer than $1 milliseconds, and how
// long each has.
const stalledScheduleSQL = `SELECT pid, (extract(epoch FROM statement_timestamp() - query_start) * 1000)::bigint
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'
  AND starts_with(query, $2) AND query_start < statement_timestamp() - $1 * interval '1 millisecond'`

// CancelStalledRiverSchedule cancels River's scheduler statements that
// have run for longer than stall. Then it analyzes River's table, so River
// plans its next run on true figures. It returns how many it cancelled and
// how long the longest ran. It leaves alone a statement that this role may
// not see or signal.
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

// analyzeLock is the first key of the advisory lock under which one
// process at a time analyzes River's table. It is the bytes "hkan".
const analyzeLock int32 = 0x686b616e

// AnalyzeJobsOnce runs ANALYZE river_job under an advisory lock. It
// returns false at once when another process holds that lock. It waits at
// most 10s for the table's lock, which autovacuum gives up to an ANALYZE.
// q must not be on a transaction.
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
// since PostgreSQL's activity statistics were last reset. A crash loses
// them, and with them autovacuum's count of changes. Autovacuum would then
// not analyze the table for a long time.
func (q *Jobs) JobsAnalyzedSinceReset(ctx context.Context) (bool, error) {
	var ok bool
	err := q.db.QueryRow(ctx, `SELECT pg_stat_get_last_analyze_time(c.oid) IS NOT NULL OR pg_stat_get_last_autoanalyze_time(c.oid) IS NOT NULL
FROM pg_class c WHERE c.oid = 'river_job'::regclass`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read when the jobs were analyzed: %w", err)
	}
	return ok, nil
}

// forwardScheduler makes a working process's due forward jobs available.
// [River.Start] starts it and [River.Stop] stops it.
type forwardScheduler struct {
	jobs  *Jobs
	queue string
	log   *slog.Logger

	// failing reports that the last pass failed. It is logged once until
	// a pass succeeds.
	failing bool
	// watched is when River's scheduler was last looked at, checked when
	// the statistics were.
	watched, checked time.Time

	// retention is River's retention of finished jobs. The counts of
	// failed forwards older than it by an hour are deleted. folded and
	// expired are when the last fold and the last deletion ran.
	// foldFailing reports that the last fold failed.
	retention       time.Duration
	folded, expired time.Time
	foldFailing     bool
}

// fold folds the failed forwards into their counts every foldEvery. Every
// expireEvery it also deletes the counts that River's retention passed. A
// failure is logged once until a fold succeeds. Meanwhile the counts read
// the unfolded failures one by one.
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

// schedule makes the due forwards available a batch at a time, and
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

// pass makes the due forwards available and folds the failed ones. It
// also cancels a stalled run of River's scheduler, and analyzes River's
// table after a reset of the statistics. It returns how many forwards it
// made available.
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

// start makes the due forwards available once, before River's client
// starts, so River's scheduler finds none due. Then it runs the loop until
// the returned stop is called.
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
