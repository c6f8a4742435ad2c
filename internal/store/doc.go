// Package store owns every SQL statement of hookgate outside the ingest
// pipeline (package dedup runs the claim, the change and the stored
// response in one transaction, with the event's and the outbox rows'
// inserts that packages events and forward queue) and outside the job
// queue (package queue owns the statements on River's table and on
// forward_delivered, and the reads that take them with the outbox as one
// set of forwards). It is the one package below the HTTP layer that the
// JSON API (package handler), the browser console (package console), the
// retention job (package retention) and forwarding (package forward) read
// and write hookgate's own tables through, so that both views of the data
// run the same queries and a schema change touches one place. One file per
// table:
//
//   - deliveries.go: processed_messages (lists, one delivery, counts,
//     retention of keys) and delivery_hour_counts (the closed hours'
//     counts kept)
//   - events.go: webhook_events (one event, its content for a forward,
//     event types, retention of events)
//   - outbox.go: forward_outbox (the relay's take, an event's rows, counts)
//   - breakers.go: target_breakers (the recorded circuit breakers)
//   - traffic.go: traffic_minutes and traffic_hours (the console's charts)
//   - sessions.go: console_revoked_sessions and console_signouts (console
//     sign-outs)
//   - processes.go: forward_processes (the worker processes' heartbeats)
//   - plans.go: the planner settings the statements on the queue tables
//     (the outbox here, River's table in package queue) run under
//
// Every query runs on a DB, which *pgxpool.Pool, *pgx.Conn and pgx.Tx all
// satisfy, through Queries. Every list pages with one Cursor format. Tests
// put rows in a given state with package storetest and River's jobs with
// package queuetest. Both live under internal/testing, which only tests
// may import.
package store
