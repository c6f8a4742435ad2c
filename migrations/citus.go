package migrations

import _ "embed" // CitusDDL

// CitusDDL is citus/distribute.sql. It distributes hookgate's tables by
// sender on a Citus coordinator, once `hookgate migrate` has brought its
// database to head.
//
//go:embed citus/distribute.sql
var CitusDDL string
