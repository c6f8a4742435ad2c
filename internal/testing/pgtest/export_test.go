package pgtest

// ReuseDBs and IsSpare let the package's external tests see whether NewDB
// reuses databases (EnvReuse) and which are spare.
var ReuseDBs = reuseDBs

func IsSpare(name string) bool { return spares.has(name) }
