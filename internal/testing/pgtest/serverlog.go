package pgtest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// serverLogFile is the server's log, relative to its data directory, as
// .ci/pg.sh starts servers (pg_ctl -l DATA/log).
const serverLogFile = "log"

// logWindow bounds what LogSince reads of the log.
const logWindow = 8 << 20

// LogSince returns a function that returns what the server of pool wrote
// to its log since LogSince was called, its last logWindow bytes at most.
// That needs the log where .ci/pg.sh
// puts it and a superuser, as make test's servers have; otherwise the
// function returns an error that says why. The log is the whole
// server's: other tests' lines may be among the test's.
func LogSince(t testing.TB, pool *pgxpool.Pool) func() (string, error) {
	t.Helper()
	var from int64
	err := pool.QueryRow(t.Context(), `SELECT size FROM pg_stat_file($1)`, serverLogFile).Scan(&from)
	return func() (string, error) {
		if err != nil {
			return "", fmt.Errorf("the server's log cannot be read: %w", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var text string
		if err := pool.QueryRow(ctx, `SELECT pg_read_file($1, s.off, s.size - s.off)
FROM (SELECT least(greatest($2, f.size - $3), f.size) AS off, f.size FROM pg_stat_file($1) f) s`, serverLogFile, from, logWindow).Scan(&text); err != nil {
			return "", fmt.Errorf("the server's log cannot be read: %w", err)
		}
		return text, nil
	}
}

// ReportsIn returns the reports of what the log since LogSince's call
// holds, as [Reports] finds them, one after another; or why it cannot
// read the log, or that it has none.
func ReportsIn(since func() (string, error), what string, most int) string {
	log, err := since()
	if err != nil {
		return err.Error()
	}
	if r := Reports(log, what, most); len(r) > 0 {
		return strings.Join(r, "\n")
	}
	return "no report of " + strconv.Quote(what) + " in the server's log"
}

// Reports returns the reports in log whose first line contains what, each
// with the lines of the same backend that follow it (DETAIL, CONTEXT,
// STATEMENT and their continuations), at most most of them.
func Reports(log, what string, most int) []string {
	var out []string
	lines := strings.Split(log, "\n")
	for i := 0; i < len(lines) && len(out) < most; i++ {
		if !strings.Contains(lines[i], what) {
			continue
		}
		pid := backendOf(lines[i])
		r := []string{lines[i]}
		for i+1 < len(lines) && (strings.HasPrefix(lines[i+1], "\t") || pid != "" && backendOf(lines[i+1]) == pid && !strings.Contains(lines[i+1], what)) {
			i++
			r = append(r, lines[i])
		}
		out = append(out, strings.Join(r, "\n"))
	}
	return out
}

// backendOf returns the "[pid]" of a log line with PostgreSQL's default
// prefix ("%m [%p] "), or "".
func backendOf(line string) string {
	open := strings.Index(line, " [")
	if open < 0 {
		return ""
	}
	end := strings.Index(line[open:], "] ")
	if end < 0 {
		return ""
	}
	return line[open+1 : open+end+1]
}
