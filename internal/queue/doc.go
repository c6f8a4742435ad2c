// Package queue is the seam between hookgate's forwarding and the job
// queue that runs its forwards, and River is its one implementation: this
// package alone imports River (but for migrations, which runs River's
// migrator; a depguard rule in .golangci.yaml keeps it out of the others'
// non-test files) and alone knows how a forward is encoded in River's
// table river_job. The rest of hookgate speaks in forwards and their five
// states (State), through:
//
//   - Queue, the small interface of what forwarding asks of a queue:
//     enqueue forwards (the relay), redeliver an event or a target's
//     forwards in a state (the operator API, the console, `hookgate
//     redeliver`), record the fast path's first attempts, and read an
//     event's forwards. River (New) implements it; handler and console
//     declare the smaller interfaces they use, which it satisfies.
//   - ForwardWorker, what works a forward job (forward.Worker): Work, with
//     Snooze, Cancel, RecordOutput and MarkProbed for what River's worker
//     API would say; Timeout and NextRetry. JobTracker learns which jobs
//     the process's workers run (forward.Takeover).
//   - Maintenance, a periodic job a working client runs beside the
//     forwards, one process at a time: package retention's runs
//     (retention.Worker.Maintenance), a plain function to River.
//   - Jobs, the statements on River's table and forward_delivered that
//     River has no API for: an event's forwards, a target's counts and
//     list, the backlog, the forwards a bulk redelivery matches, the
//     recording of the fast path's outcomes, the locks that serialise
//     redeliveries, the takeover of the jobs of processes that are gone.
//
// One file per concern:
//
//   - river.go: Queue, River, Job, ForwardWorker and the River worker and
//     middleware around them
//   - client.go: River's client (ClientConfig, New): queues, timeouts, the
//     rescue horizon
//   - maintenance.go: the maintenance job (Maintenance: package
//     retention's runs), its River job kind, worker and periodic job
//   - args.go: a forward job's arguments (Args) and insert options
//   - redeliver.go, bulkredeliver.go: redelivery of one event, and in bulk
//     (the bulk job's worker)
//   - jobs.go: the forward job kind (formatted into SQL once:
//     forwardKind), a forward (Forward, Output) as read from its job, and
//     the breaker's wake of a target's waiting forwards
//   - schedule.go: the forwards made available when their time comes by
//     hookgate itself, not by River's job scheduler, which hookgate
//     cancels and analyzes the table for when its plan stalls
//   - states.go: hookgate's five forward states, the one mapping of them
//     to River's job states, and River's state names as the statements'
//     parameters (never literals in their SQL)
//   - reads.go: the operator reads (an event's forwards, a target's counts
//     and list, the backlog)
//   - failed.go: the failed forwards a newer one superseded (marked when
//     it is added), and their counts, kept by sender, target and hour
//   - bulk.go: the forwards a bulk redelivery matches
//   - delivered.go: forward_delivered, the fast path's delivered first
//     attempts, and the recording of the fast path's outcomes in the
//     states River's executor would leave (the retry schedule is
//     forward's; when River's scheduler makes a retry available is this
//     package's knowledge)
//   - redelivery.go: an event's current forwards and the locks that
//     serialise redeliveries
//   - takeover.go: the jobs of processes that are gone
//   - analyze.go: VACUUM ANALYZE of River's table (tests that need fresh
//     statistics)
//
// The lock order. Hookgate's statements that update River's jobs never
// wait for a row lock: the scheduling of due forwards (scheduleSQL), the
// breaker's wake (wakeSQL) and the takeover (takeOverSQL,
// releaseOrphansSQL) take their jobs with FOR UPDATE SKIP LOCKED in an
// InitPlan and update only those; a job another transaction holds is left
// to it (River's fetch makes it running, its scheduler available, its
// completer writes its outcome) or to the next pass. Their transactions
// are one statement each and hold no other lock. A statement that never
// waits for a lock is in no cycle of waits, so none of them can deadlock
// with River's statements, which lock in orders of their own: the fetch
// SKIP LOCKED in (priority, scheduled_at, id) order, the scheduler FOR
// UPDATE in the same order, waiting, the completer in the order of a Go
// map, waiting, the rescuer and the cleaner by ID. A statement of River's
// may wait for one of hookgate's for the milliseconds it runs. Hookgate's
// inserts (the relay's, the fast path's recording, the redeliveries) lock
// only the jobs they add, and wait only where River's insert of a unique
// forward does: for the transaction that holds the unfinished forward of
// its key. Their last statements mark the older forwards their new ones
// supersede (failed.go), FOR UPDATE SKIP LOCKED in an InitPlan too, after
// taking countsLock in share mode when there is anything to mark; the fold
// of the failed forwards into their counts takes countsLock exclusively
// without waiting (it skips its turn) and then waits for nothing: a
// marking may wait for a fold, never a fold for anything. Two markings
// lock the counts' rows in their key's order. Before (issue 43), the wake's UPDATE waited behind the
// scheduler's locks, then locked the jobs River had fetched meanwhile as
// it went (an UPDATE locks the newest version of a row it rechecks), in
// an order the completer did not share: PostgreSQL found deadlocks
// (TestBreakerWakeNeverDeadlocks).
//
// TestRiverSchema (riverschema_test.go) checks that River's schema is the
// one these statements were written for: river_job's columns and their
// types, River's job states, the columns the fast path's insert must give,
// River's job sequence and the indexes the reads use. A River upgrade that
// changes any of them fails there first. The statements' plans are checked
// under lying statistics by TestQueuePlansWhenStatisticsLie (plans_test.go),
// with the store's statements they run beside, and River's own statements
// on its table in a working process's steady state by
// TestRiverPlansWhenStatisticsLie (riverplans_test.go).
//
// Tests put River's jobs in a given state with package queuetest, under
// internal/testing, which only tests may import.
package queue
