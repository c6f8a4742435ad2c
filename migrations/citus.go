package migrations

import _ "embed" // CitusDDL

// CitusDDL distributes hookgate's tables by sender on a Citus coordinator
// whose database `hookgate migrate` has brought to head (docs/distributed.md):
// citus/distribute.sql.
//
//go:embed citus/distribute.sql
var CitusDDL string
