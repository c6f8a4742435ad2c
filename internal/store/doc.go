// Package store runs every SQL statement on hookgate's own tables outside
// the ingest pipeline and the job queue. Package dedup runs the ingest
// transaction, and package queue the statements on River's table.
//
// The operator API, the console, retention and forwarding all read and
// write through it. Both views of the data run the same queries, and a
// schema change touches one place. Each file holds the statements of one
// table.
//
// Every query runs on a [DB] through [Queries]. Every list pages with one
// [Cursor] format. Tests put rows in a given state with package storetest,
// under internal/testing, which only tests may import.
package store
