// Package queue is the seam between hookgate's forwarding and the job queue
// that runs its forwards. River is its one implementation. Only this package
// imports River, and only it knows how a forward is stored in river_job.
// The exception is package migrations, which runs River's migrator; a
// depguard rule keeps River out of every other non-test file.
//
// The rest of hookgate speaks in forwards and their five [State] values,
// through four types:
//
//   - [Queue] is what forwarding asks of a queue. It enqueues forwards,
//     redelivers an event or a target's forwards, records the fast path's
//     first attempts and reads an event's forwards. [River] implements it.
//     Handler and console declare smaller interfaces that it satisfies.
//   - [ForwardWorker] works a forward job. [JobTracker] learns which jobs
//     the process's workers run, so that a takeover can tell them apart.
//   - [Maintenance] is a periodic job that one working process runs
//     beside the forwards, such as the retention runs.
//   - [Jobs] holds the statements on river_job and forward_delivered that
//     River has no API for: reads, counts, bulk matches, the fast path's
//     outcomes, the redelivery locks and the takeover.
//
// # Plans
//
// The statements are written so that their plans do not depend on the
// statistics, which a crash or an outage can make lie. Each runs under a
// planner setting of package store, such as [store.IndexOrderScans], which
// disables sequential scans, bitmap scans and sorts. The statement's ORDER
// BY then leaves one path without a disabled node: the index it was
// written for. A probe compares the event as a range, so that the index's
// order needs no sort. A probe is a scalar subquery with LIMIT 1, since
// EXISTS would drop its ORDER BY. The predicate of a partial index is
// written with literals, since a parameter implies nothing in a generic
// plan.
//
// # Lock order
//
// Hookgate's statements that update River's jobs never wait for a row lock.
// The scheduling of due forwards, the breaker's wake and the takeover take
// their jobs with FOR UPDATE SKIP LOCKED in an InitPlan and update only
// those. A job that another transaction holds is left to it or to the next
// pass. Each of these transactions is one statement and holds no other lock.
// A statement that never waits is in no cycle of waits, so none of them can
// deadlock with River's statements, whatever order River locks in.
//
// Hookgate's inserts lock only the jobs they add. They wait only where
// River's insert of a unique forward waits: for the transaction that holds
// the unfinished forward of the same key. Their last statements mark the
// older forwards that the new ones supersede, also with SKIP LOCKED. They
// take countsLock in share mode first when there is anything to mark. The
// fold of failed forwards into their counts takes countsLock exclusively
// without waiting, and skips its turn when it cannot. So a marking may wait
// for a fold, but a fold never waits. Two markings lock the counts' rows in
// the order of their keys.
//
// The tests check that River's schema is the one these statements were
// written for, and that their plans hold when the statistics lie. A River
// upgrade that changes the schema fails those tests first. Tests put River's
// jobs in a given state with package queuetest, which only tests may import.
package queue
