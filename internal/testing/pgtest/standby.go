package pgtest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// StartStandby makes a streaming standby of c (pg_basebackup -R), named
// name in c's pg_stat_replication, and starts it on a free port. With
// sync, c then waits for the standby's flush at each COMMIT
// (synchronous_standby_names). It is stopped and removed when the test
// ends, and fails the test on any error.
func (c *Cluster) StartStandby(t testing.TB, name string, sync bool) *Cluster {
	t.Helper()
	s := newCluster(t, c.bindir)
	out, err := s.asServer(filepath.Join(c.bindir, "pg_basebackup"), "-h", "127.0.0.1", "-p", fmt.Sprint(c.port), "-U", "hookgate",
		"-D", s.dataDir(), "-R", "-X", "stream", "-c", "fast", "-d", "application_name="+name)
	if err != nil {
		t.Fatalf("pgtest: pg_basebackup: %v\n%s", err, out)
	}
	if err := s.startOnFreePort(); err != nil {
		t.Fatalf("pgtest: start standby: %v", err)
	}
	if sync {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if err := adminExec(ctx, c.urlFor("postgres"), "ALTER SYSTEM SET synchronous_standby_names = '"+name+"'", "SELECT pg_reload_conf()"); err != nil {
			t.Fatalf("pgtest: make the standby synchronous: %v", err)
		}
	}
	return s
}

// Promote makes the standby c a primary (pg_ctl promote) and returns once
// it takes writes.
func (c *Cluster) Promote(t testing.TB) {
	t.Helper()
	if out, err := c.asServer(filepath.Join(c.bindir, "pg_ctl"), "-D", c.dataDir(), "-w", "-t", "60", "promote"); err != nil {
		t.Fatalf("pgtest: promote: %v\n%s", err, out)
	}
}
