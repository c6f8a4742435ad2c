package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/hookgate/hookgate/internal/access"
	"github.com/hookgate/hookgate/internal/authlimit"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/console"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/forward/transport"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/retention"
	"github.com/hookgate/hookgate/internal/store"
)

// settings are the values of the flags and environment variables of serve
// and migrate, parsed by the rows of [settingTable]. A row that configures
// a component writes into that component's Config, which starts at its
// defaults. serve adds only the dependencies before calling the
// constructor. A new setting is a row of the table and the field it writes.
type settings struct {
	// The process's own.
	databaseURL  string
	addr         string
	configPath   string
	configWatch  bool // reload configPath when its content changes
	logFormat    string
	shutdownWait time.Duration
	role         string
	fastPath     bool                    // role all: attempt forwards right after COMMIT
	onWorkers    bool                    // Citus: ingest calls straight to the sender's worker
	citusWorkers []string                // Citus: the workers onWorkers may reach; nil: with verify-full only
	allowedHosts *transport.AllowedHosts // the hosts forwards may reach; nil: any
	pprofAddr    string
	metricsAddr  string // "": /metrics on the main listener
	heapFloor    uint64 // bytes; 0: GOGC's pace alone (heapfloor)

	maxHeaderBytes      int
	allowExampleSecrets bool

	// The components'.
	handler   handler.Config   // the admin and read tokens, the body budget and pace, MetricsElsewhere
	console   console.Config   // the admin and read tokens, the trusted proxies, the session TTL
	dedup     dedup.Config     // the in-flight wait, group commit, the replay cache, shedding
	retention retention.Config // the interval, the audit trail's retention
	// client holds MaxWorkers, FetchPollInterval and RescueAfter. A zero
	// RescueAfter is computed from the targets.
	client     queue.ClientConfig
	gate       forward.GateConfig       // Capacity, the breakers
	worker     forward.WorkerConfig     // the backoff, RetryAfterMax
	dispatcher forward.DispatcherConfig // Workers, FixedLease (0: each target's timeout plus LeaseMargin)
}

// defaultSettings returns the settings before the table's rows are
// parsed: each component's Config at its defaults. The River client's
// depend on the senders, and [forwardClientConfig] fills them in.
func defaultSettings() *settings {
	s := &settings{
		handler:    handler.DefaultConfig(),
		console:    console.DefaultConfig(),
		dedup:      dedup.DefaultConfig(),
		retention:  retention.DefaultConfig(),
		gate:       forward.DefaultGateConfig(),
		worker:     forward.DefaultWorkerConfig(),
		dispatcher: forward.DefaultDispatcherConfig(),
	}
	s.handler.BodyReadTimeout = readTimeout
	return s
}

// defaultHeapFloor is --heap-floor's default, 100 MiB: with it, under
// make bench's load, a delivery cost the gateway 3–7 µs less CPU, and
// 10–13 µs less with a forward, for up to 100 MiB more memory
// (docs/performance.md). maxHeapFloor is the largest value accepted, 64 GiB.
const (
	defaultHeapFloor = 100 << 20
	maxHeapFloor     = 64 << 30
)

// maxInFlightWait is the longest in-flight wait serve accepts. The ingest
// transaction gets 15s in all, and the wait must end well within it to be
// answered 409 rather than 503.
const maxInFlightWait = 10 * time.Second

// defaultMaxHeaderBytes bounds a request's header section. net/http's own
// default is 1 MiB.
const defaultMaxHeaderBytes = 64 << 10

// Roles of a serve process.
const (
	roleAll    = "all"    // ingest and forward
	roleAPI    = "api"    // ingest only: forwards are enqueued, not worked
	roleWorker = "worker" // forward only: serves /healthz, /readyz and /metrics
)

// setting is one row of the settings table. It holds a flag of serve and
// migrate, the environment variable read without the flag, and the default
// without either. It also says how the text is parsed, and the help.
//
// Here and in the components' Config structs, 0 means zero. A size of 0
// turns its feature off where it can be off, and is refused where it
// cannot. A default is never inferred from a 0. A computed default, such
// as the rescue horizon, has an empty def, and only the empty value means
// "computed".
type setting struct {
	flag string // without the dashes
	env  string
	// def is the text parsed when neither the flag nor the variable is
	// given, or "".
	def string
	// shown is the default as docs/configuration.md writes it when def is
	// empty, such as "(required)".
	shown string
	help  string
	// parse stores the text v in s. Its error says what v must be.
	parse func(s *settings, v string) error
	// boolean is set when the flag may be given without a value, for true.
	boolean bool
}

// shownDefault is the default of st as docs/configuration.md's table
// writes it.
func (st *setting) shownDefault() string {
	if st.def != "" {
		return "`" + st.def + "`"
	}
	return st.shown
}

// settingTable lists every setting of serve and migrate. It makes the
// flags, the environment lookups and the help text. docs/configuration.md's
// table lists the same rows, and a test checks that.
var settingTable = []setting{
	{flag: "database-url", env: "DATABASE_URL", shown: "(required)",
		help:  "PostgreSQL connection URL",
		parse: func(s *settings, v string) error { s.databaseURL = v; return nil }},
	{flag: "addr", env: "HOOKGATE_ADDR", def: ":8080",
		help:  "listen address",
		parse: func(s *settings, v string) error { s.addr = v; return nil }},
	{flag: "config", env: "HOOKGATE_CONFIG", def: "hookgate.yaml",
		help:  "senders configuration file",
		parse: func(s *settings, v string) error { s.configPath = v; return nil }},
	{flag: "config-watch", env: "HOOKGATE_CONFIG_WATCH", def: "false", boolean: true,
		help:  "reload the senders configuration file when its content changes (its SHA-256 is read every second; a Kubernetes ConfigMap update swaps it), as SIGHUP and POST /v1/config/reload do; an invalid file is refused and the running configuration kept",
		parse: boolSetting("config watch", func(s *settings) *bool { return &s.configWatch })},
	{flag: "admin-token", env: "HOOKGATE_ADMIN_TOKEN", shown: "(none)",
		help:  "bearer token of the operator API and the console; a weak one (under 128 bits of estimated entropy, only whitespace, a repeated pattern, mostly dictionary words, keyboard rows, sequences or dates) is refused: use openssl rand -hex 32",
		parse: parseAdminToken},
	{flag: "read-tokens", env: "HOOKGATE_READ_TOKENS", shown: "(none)",
		help:  "comma-separated name:token pairs of read-only tokens of the operator API and the console: they read everything and change nothing; a name is 1 to 32 of a-z, 0-9, -, _ and ., not admin, each once; each token is checked as the admin token is, and must differ from it and from the others",
		parse: parseReadTokens},
	{flag: "in-flight-wait", env: "HOOKGATE_IN_FLIGHT_WAIT", def: dedup.DefaultInFlightWait.String(),
		help: "how long a delivery waits for a concurrent one with the same ID before 409 (at most 10s)",
		parse: func(s *settings, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Millisecond || d > maxInFlightWait {
				return fmt.Errorf("in-flight wait %q: must be a duration from 1ms to %s, such as 3s", v, maxInFlightWait)
			}
			s.dedup.InFlightWait = d
			return nil
		}},
	{flag: "log-format", env: "HOOKGATE_LOG_FORMAT", def: "json",
		help: "log format: json or text",
		parse: func(s *settings, v string) error {
			if v != "json" && v != "text" {
				return fmt.Errorf("log format %q: must be json or text", v)
			}
			s.logFormat = v
			return nil
		}},
	{flag: "role", env: "HOOKGATE_ROLE", def: roleAll,
		help: "what this process does: all, api (ingest) or worker (forward)",
		parse: func(s *settings, v string) error {
			if v != roleAll && v != roleAPI && v != roleWorker {
				return fmt.Errorf("role %q: must be all, api or worker", v)
			}
			s.role = v
			return nil
		}},
	{flag: "ingest-queue-target", env: "HOOKGATE_INGEST_QUEUE_TARGET", def: dedup.DefaultShedTarget.String(),
		help:  "queueing delay for the database that, exceeded by every delivery for a second, sheds new deliveries with 503 until the queue drains (1ms to 1m)",
		parse: durationIn(func(s *settings) *time.Duration { return &s.dedup.Shedding.Target }, "ingest queue target", time.Millisecond, time.Minute)},
	{flag: "ingest-max-queue-wait", env: "HOOKGATE_INGEST_MAX_QUEUE_WAIT", def: dedup.DefaultMaxQueueWait.String(),
		help:  "longest a delivery waits for the database (a batch slot or a connection) before it is answered 503 (10ms to 10s)",
		parse: durationIn(func(s *settings) *time.Duration { return &s.dedup.Shedding.MaxWait }, "ingest max queue wait", 10*time.Millisecond, maxInFlightWait)},
	{flag: "ingest-body-budget", env: "HOOKGATE_INGEST_BODY_BUDGET", def: strconv.Itoa(handler.DefaultBodyBudget),
		help: "bytes of request bodies that ingest requests hold in memory at once, as their bytes arrive (at least 1048576); past it a delivery waits for room, then gets 503; a quarter is kept for bodies up to 64 KiB, and one client holds at most a quarter",
		parse: func(s *settings, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1<<20 {
				return fmt.Errorf("ingest body budget %q: must be a whole number of bytes, at least 1048576 (1 MiB)", v)
			}
			s.handler.BodyBudget = n
			return nil
		}},
	{flag: "ingest-body-budget-wait", env: "HOOKGATE_INGEST_BODY_BUDGET_WAIT", def: handler.DefaultBodyBudgetWait.String(),
		help:  "longest a delivery waits for room in the body budget before it is answered 503 (1ms to 1m)",
		parse: durationIn(func(s *settings) *time.Duration { return &s.handler.BodyBudgetWait }, "ingest body budget wait", time.Millisecond, time.Minute)},
	{flag: "ingest-body-min-rate", env: "HOOKGATE_INGEST_BODY_MIN_RATE", def: strconv.Itoa(handler.DefaultBodyMinRate),
		help: "bytes per second at which a request body must arrive on average once its grace period has passed; slower gets 408 and the connection is closed; 0 for no minimum",
		parse: func(s *settings, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || n > handler.MaxBodyMinRate {
				return fmt.Errorf("ingest body min rate %q: must be a whole number of bytes per second from 0 (no minimum) to %d", v, handler.MaxBodyMinRate)
			}
			s.handler.BodyMinRate = n
			return nil
		}},
	{flag: "ingest-body-min-rate-grace", env: "HOOKGATE_INGEST_BODY_MIN_RATE_GRACE", def: handler.DefaultBodyMinRateGrace.String(),
		help:  "how long a request body may take before --ingest-body-min-rate applies to it (0s to 1m)",
		parse: durationIn(func(s *settings) *time.Duration { return &s.handler.BodyMinRateGrace }, "ingest body min rate grace", 0, time.Minute)},
	{flag: "ingest-body-idle-timeout", env: "HOOKGATE_INGEST_BODY_IDLE_TIMEOUT", def: handler.DefaultBodyIdleTimeout.String(),
		help:  "longest a request body may pause (no byte arriving), whatever it sent before; past it the request gets 408 and the connection is closed (0s for no bound, to 1m)",
		parse: durationIn(func(s *settings) *time.Duration { return &s.handler.BodyIdleTimeout }, "ingest body idle timeout", 0, time.Minute)},
	{flag: "trusted-proxies", env: "HOOKGATE_TRUSTED_PROXIES", shown: "(none)",
		help: "comma-separated addresses or CIDR prefixes of reverse proxies whose X-Forwarded-Proto: https makes the console's session cookie Secure, and whose X-Forwarded-For names the client the wrong-token limit counts and the body budget gives its share to",
		parse: func(s *settings, v string) error {
			p, err := console.ParseTrustedProxies(v)
			if err != nil {
				return fmt.Errorf("trusted proxies %q: %w; give addresses or CIDR prefixes separated by commas, such as 10.0.0.0/8,127.0.0.1", v, err)
			}
			s.console.TrustedProxies = p
			return nil
		}},
	{flag: "console-session-ttl", env: "HOOKGATE_CONSOLE_SESSION_TTL", def: shortDuration(console.DefaultSessionTTL),
		help: "how long a console sign-in lasts (at least 1m)",
		parse: func(s *settings, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Minute {
				return fmt.Errorf("console session TTL %q: must be a duration of at least 1m, such as 12h", v)
			}
			s.console.SessionTTL = d
			return nil
		}},
	{flag: "max-header-bytes", env: "HOOKGATE_MAX_HEADER_BYTES", def: strconv.Itoa(defaultMaxHeaderBytes),
		help: "largest request header section accepted, in bytes (4096 to 1048576); larger gets 431",
		parse: func(s *settings, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 4096 || n > 1<<20 {
				return fmt.Errorf("max header bytes %q: must be a whole number from 4096 to 1048576", v)
			}
			s.maxHeaderBytes = n
			return nil
		}},
	{flag: "ingest-batch-size", env: "HOOKGATE_INGEST_BATCH_SIZE", def: strconv.Itoa(dedup.DefaultMaxBatch),
		help:  "most deliveries of one sender committed in one transaction (group commit); 1 turns batching off",
		parse: intSetting("ingest batch size", 1, 1000, func(s *settings) *int { return &s.dedup.Batching.MaxBatch })},
	{flag: "ingest-batches-in-flight", env: "HOOKGATE_INGEST_BATCHES_IN_FLIGHT", shown: "`" + strconv.Itoa(dedup.DefaultMaxInFlight) + "`; `" + strconv.Itoa(distributedMaxInFlight) + "` on Citus",
		help: "most batches of one sender in flight at once; a batch starts beside those running only once each of them has run for " + dedup.DefaultOverlapAfter.String() + ", so that one runs at a time while the database keeps up, and one held up (a key another transaction holds) does not hold up the sender; 1 when the tables are distributed by Citus, for larger batches (each batch costs Citus a call on the sender's worker)",
		parse: func(s *settings, v string) error {
			if v == "" {
				s.dedup.Batching.MaxInFlight = 0 // computed: ingestConfig
				return nil
			}
			return intSetting("ingest batches in flight", 1, 64, func(s *settings) *int { return &s.dedup.Batching.MaxInFlight })(s, v)
		}},
	{flag: "citus-ingest-on-workers", env: "HOOKGATE_CITUS_INGEST_ON_WORKERS", def: "true", boolean: true,
		help:  "on Citus, send each ingest call straight to the worker that holds the sender's shards rather than through the coordinator, with DATABASE_URL's user, password and TLS settings: to the workers --citus-worker-hosts lists, or, when it lists none, to the workers of pg_dist_node only if DATABASE_URL has sslmode=verify-full (each verified against its own name); otherwise, and for a worker it cannot reach, the calls go through the coordinator",
		parse: boolSetting("citus ingest on workers", func(s *settings) *bool { return &s.onWorkers })},
	{flag: "citus-worker-hosts", env: "HOOKGATE_CITUS_WORKER_HOSTS", shown: "(none)",
		help: "comma-separated host:port of the Citus workers, as pg_dist_node names them, that --citus-ingest-on-workers may send DATABASE_URL's credentials and the deliveries to; a worker not listed is never contacted; empty: none, unless DATABASE_URL has sslmode=verify-full",
		parse: func(s *settings, v string) error {
			ws, err := dedup.ParseWorkerHosts(v)
			if err != nil {
				return err
			}
			s.citusWorkers = ws
			return nil
		}},
	{flag: "replay-cache-size", env: "HOOKGATE_REPLAY_CACHE_SIZE", def: strconv.Itoa(dedup.DefaultReplayCacheSize),
		help: "committed deliveries this process remembers to answer their retries without a database round trip (for at most a minute, never past their retention); 0 turns it off",
		parse: func(s *settings, v string) error {
			var n int
			if err := intSetting("replay cache size", 0, 10_000_000, func(*settings) *int { return &n })(s, v); err != nil {
				return err
			}
			s.dedup.ReplayCache = nil // 0: no replay cache
			if n > 0 {
				s.dedup.ReplayCache = &dedup.ReplayCache{Size: n, TTL: dedup.DefaultReplayCacheTTL}
			}
			return nil
		}},
	{flag: "pprof-addr", env: "HOOKGATE_PPROF_ADDR", shown: "(off)",
		help:  "serve Go's profiler (net/http/pprof) on this address, e.g. 127.0.0.1:6060; off when empty; never expose it beyond the host",
		parse: func(s *settings, v string) error { s.pprofAddr = v; return nil }},
	{flag: "metrics-addr", env: "HOOKGATE_METRICS_ADDR", shown: "(the main listener)",
		help:  "serve /metrics on this address instead of the main listener (which then answers 404 there), e.g. 10.0.0.5:9090 or 127.0.0.1:9090",
		parse: func(s *settings, v string) error { s.metricsAddr, s.handler.MetricsElsewhere = v, v != ""; return nil }},
	{flag: "heap-floor", env: "HOOKGATE_HEAP_FLOOR", def: strconv.Itoa(defaultHeapFloor),
		help: "the Go heap's goal for the garbage collector's next cycle while the live heap is small (under about half of it): fewer cycles, less CPU (0 for none: GOGC's pace alone, less memory and more CPU); it costs about its size in memory beyond GOGC's; after each cycle it sets the Go memory limit to half again its goal plus the runtime's memory outside the heap, which bounds a burst at once; the Go memory limit of the environment (GOMEMLIMIT, else 90% of the container's memory limit, AUTOMEMLIMIT=off or another ratio) still applies, and caps the floor at half",
		parse: func(s *settings, v string) error {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n > maxHeapFloor {
				return fmt.Errorf("heap floor %q: must be a whole number of bytes from 0 (none) to %d (64 GiB)", v, uint64(maxHeapFloor))
			}
			s.heapFloor = n
			return nil
		}},
	{flag: "shutdown-timeout", env: "HOOKGATE_SHUTDOWN_TIMEOUT", def: "20s",
		help:  "how long in-flight requests and forwards may take to finish on shutdown",
		parse: durationSetting("shutdown timeout", 0, func(s *settings) *time.Duration { return &s.shutdownWait })},
	{flag: "forward-workers", env: "HOOKGATE_FORWARD_WORKERS", def: strconv.Itoa(queue.DefaultMaxWorkers),
		help: "forwards run at once by this process",
		parse: func(s *settings, v string) error {
			// The River client's workers and the gate's capacity are one.
			if err := intSetting("forward workers", 1, 10_000, func(s *settings) *int { return &s.client.MaxWorkers })(s, v); err != nil {
				return err
			}
			s.gate.Capacity = s.client.MaxWorkers
			return nil
		}},
	{flag: "forward-backoff-base", env: "HOOKGATE_FORWARD_BACKOFF_BASE", def: shortDuration(forward.DefaultBackoff.Base),
		help:  "first retry delay of a failed forward; it doubles per attempt",
		parse: durationSetting("forward backoff base", time.Millisecond, func(s *settings) *time.Duration { return &s.worker.Backoff.Base })},
	{flag: "forward-backoff-max", env: "HOOKGATE_FORWARD_BACKOFF_MAX", def: shortDuration(forward.DefaultBackoff.Max),
		help:  "longest retry delay of a failed forward",
		parse: durationSetting("forward backoff max", time.Millisecond, func(s *settings) *time.Duration { return &s.worker.Backoff.Max })},
	{flag: "forward-retry-after-max", env: "HOOKGATE_FORWARD_RETRY_AFTER_MAX", def: shortDuration(forward.DefaultRetryAfterMax),
		help:  "longest Retry-After honoured (at least 1s): a 429 or 503 with Retry-After pauses its target for what it asks up to this, and a forward's retry after a Retry-After waits at least that long, up to this, whatever the backoff's max",
		parse: durationSetting("forward retry-after max", time.Second, func(s *settings) *time.Duration { return &s.worker.RetryAfterMax })},
	{flag: "forward-attempts-kept", env: "HOOKGATE_FORWARD_ATTEMPTS_KEPT", def: strconv.Itoa(store.DefaultAttemptsKept),
		help:  "how many attempts of each forward are kept with their answers, the newest (1 to 1000): River's worker deletes older ones as it records each",
		parse: intSetting("forward attempts kept", 1, 1000, func(s *settings) *int { return &s.worker.AttemptsKept })},
	{flag: "forward-rescue-after", env: "HOOKGATE_FORWARD_RESCUE_AFTER", shown: "longest target timeout + 5s + 1m",
		help: "how long a job may stay running before River's rescuer retries it: the backstop for jobs of processes without heartbeats (a killed hookgate process's are taken over 5s after its last heartbeat); bulk redeliveries and retention run in slices of it minus 5s; when set, it must exceed the longest target timeout + 5s (a forward's own timeout)",
		parse: func(s *settings, v string) error {
			if v == "" {
				s.client.RescueAfter = 0 // computed: queue.DefaultClientConfig (forwardClientConfig)
				return nil
			}
			return durationSetting("forward rescue after", time.Second, func(s *settings) *time.Duration { return &s.client.RescueAfter })(s, v)
		}},
	{flag: "forward-poll-interval", env: "HOOKGATE_FORWARD_POLL_INTERVAL", def: shortDuration(queue.DefaultFetchPollInterval),
		help:  "how often workers poll for forwards between notifications (at least 100ms)",
		parse: durationSetting("forward poll interval", 100*time.Millisecond, func(s *settings) *time.Duration { return &s.client.FetchPollInterval })},
	{flag: "forward-fast-path", env: "HOOKGATE_FORWARD_FAST_PATH", def: "true", boolean: true,
		help:  "with --role all, attempt each accepted delivery's forwards right after COMMIT, from memory, and hand only failures to the retry queue",
		parse: boolSetting("forward fast path", func(s *settings) *bool { return &s.fastPath })},
	{flag: "forward-fast-path-workers", env: "HOOKGATE_FORWARD_FAST_PATH_WORKERS", def: strconv.Itoa(forward.DefaultDispatchWorkers),
		help:  "forwards the fast path runs at once; up to 1024 more wait in its queue, and past that they are left to the retry queue",
		parse: intSetting("forward fast path workers", 1, 10_000, func(s *settings) *int { return &s.dispatcher.Workers })},
	{flag: "forward-lease", env: "HOOKGATE_FORWARD_LEASE", shown: "the target's timeout + 4s",
		help: "how long the fast path holds a forward's outbox row before the relay may take it: how long a crash delays that forward; set, the same for every target, and attempts are cut short to fit it (at least 3s)",
		parse: func(s *settings, v string) error {
			if v == "" {
				s.dispatcher.FixedLease = 0 // unset: per target (forward.DispatcherConfig.LeaseMargin)
				return nil
			}
			return durationSetting("forward lease", 3*time.Second, func(s *settings) *time.Duration { return &s.dispatcher.FixedLease })(s, v)
		}},
	{flag: "forward-allowed-hosts", env: "HOOKGATE_FORWARD_ALLOWED_HOSTS", shown: "(any host)",
		help: "comma-separated hosts forwards may reach: names (orders.internal), *.example.com for any name under a domain, addresses and CIDR prefixes (10.0.0.0/8); every target's URL is checked at start-up, and a name allowed only by a prefix at each connection, against the address dialed; empty: any host",
		parse: func(s *settings, v string) error {
			a, err := transport.ParseAllowedHosts(v)
			if err != nil {
				return err
			}
			s.allowedHosts = a
			return nil
		}},
	{flag: "retention-interval", env: "HOOKGATE_RETENTION_INTERVAL", def: shortDuration(retention.DefaultInterval),
		help:  "how often expired keys and old events are deleted (by one worker process at a time)",
		parse: durationSetting("retention interval", time.Second, func(s *settings) *time.Duration { return &s.retention.Interval })},
	{flag: "audit-retention", env: "HOOKGATE_AUDIT_RETENTION", def: shortDuration(retention.DefaultAuditRetention),
		help:  "how long the audit trail keeps an operator's action (sign-in, redelivery, pause, reload…); older rows are deleted with the expired keys; 2160h is 90 days",
		parse: durationSetting("audit retention", time.Hour, func(s *settings) *time.Duration { return &s.retention.AuditRetention })},
	{flag: "allow-example-secrets", env: config.ExampleSecretsEnv, def: "false", boolean: true,
		help:  "start even though hookgate.yaml uses a secret published in hookgate.example.yaml (a local trial only; make run sets it)",
		parse: boolSetting("allow example secrets", func(s *settings) *bool { return &s.allowExampleSecrets })},
}

// boolSetting parses 1 or 0, true or false, into the field at.
func boolSetting(name string, at func(*settings) *bool) func(*settings, string) error {
	return func(s *settings, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s %q: must be 1 or 0 (true or false)", name, v)
		}
		*at(s) = b
		return nil
	}
}

// intSetting parses a whole number from min to max into the field at.
func intSetting(name string, min, max int, at func(*settings) *int) func(*settings, string) error {
	return func(s *settings, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < min || n > max {
			return fmt.Errorf("%s %q: must be a whole number from %d to %d", name, v, min, max)
		}
		*at(s) = n
		return nil
	}
}

// durationSetting parses a duration of at least min into the field at.
func durationSetting(name string, min time.Duration, at func(*settings) *time.Duration) func(*settings, string) error {
	return func(s *settings, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < min {
			return fmt.Errorf("%s %q: must be a duration of at least %s, such as 30s", name, v, shortDuration(min))
		}
		*at(s) = d
		return nil
	}
}

// shortDuration writes d without zero units: 1h, 1m, 12h, 100ms.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// parseAdminToken refuses a weak admin token, see [authlimit.CheckToken].
// The wrong-token limit never refuses the right token, which is safe only
// when guessing it is hopeless.
func parseAdminToken(s *settings, v string) error {
	if v != "" {
		if err := authlimit.CheckToken(v); err != nil {
			return err
		}
	}
	s.handler.AdminToken, s.console.AdminToken = v, v // the console signs in with it too
	return nil
}

// parseReadTokens reads HOOKGATE_READ_TOKENS and refuses a weak token, as
// parseAdminToken does. validate checks them against the admin token.
func parseReadTokens(s *settings, v string) error {
	read, err := access.ParseReadTokens(v)
	if err != nil {
		return err
	}
	for _, t := range read {
		if err := authlimit.CheckTokenOf(fmt.Sprintf("read token %q", t.Name), t.Value); err != nil {
			return err
		}
	}
	s.handler.ReadTokens, s.console.ReadTokens = read, read
	return nil
}

// textValue is a flag's text, parsed after all flags are read.
type textValue struct {
	v       *string
	boolean bool
}

func (t textValue) String() string {
	return "" // the help writes the default itself
}

func (t textValue) Set(v string) error { *t.v = v; return nil }

func (t textValue) IsBoolFlag() bool { return t.boolean }

// shownPlain is the default of st as docs/configuration.md shows it,
// without its Markdown: for the help.
func (st *setting) shownPlain() string {
	if st.def != "" {
		return st.def
	}
	return strings.ReplaceAll(strings.Trim(st.shown, "()"), "`", "")
}

// usage returns the whole help text of the flag of st, with its variable
// and its default.
func (st *setting) usage() string {
	return fmt.Sprintf("%s (env %s; default %s)", st.help, st.env, st.shownPlain())
}

// parseSettings reads the settings of command name from the flags in args.
// It falls back to the environment, then to each row's default. With
// --help, it prints the command's flags, one a line, to stdout and returns
// errHelpShown.
func parseSettings(name string, args []string, getenv func(string) string, stdout io.Writer) (*settings, error) {
	usage, about := "hookgate [serve] [FLAGS]", "Apply pending migrations, then serve deliveries, forwards, the operator API and the console."
	if name == "migrate" {
		usage, about = "hookgate migrate [FLAGS]", "Apply pending migrations and exit."
	}
	c := newCmdFlags("hookgate "+name, usage, about, getenv)
	c.footer = "Each flag's full description: docs/configuration.md#settings."
	if name == "migrate" {
		c.footer = "migrate accepts serve's flags too, and ignores the others (hookgate serve --help lists them)."
	}
	text := make([]string, len(settingTable))
	for i := range settingTable {
		st := &settingTable[i]
		text[i] = c.envOr(st.env, st.def)
		v := textValue{v: &text[i], boolean: st.boolean}
		if name == "migrate" && st.flag != "database-url" && st.flag != "log-format" {
			c.fs.Var(v, st.flag, st.usage())
			continue
		}
		arg := "VALUE"
		if st.boolean {
			arg = ""
		}
		c.Var(v, st.flag, arg, st.env, st.shownPlain(), shortHelp(st.help))
	}
	done, err := c.parse(args, stdout)
	if done {
		return nil, errHelpShown
	}
	if err != nil {
		return nil, err
	}
	if err := c.noArgs(); err != nil {
		return nil, err
	}
	s := defaultSettings()
	for i := range settingTable {
		if err := settingTable[i].parse(s, text[i]); err != nil {
			return nil, err
		}
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// validate checks what no single setting can: how settings relate.
func (s *settings) validate() error {
	if len(s.handler.ReadTokens) > 0 && s.handler.AdminToken == "" {
		return errors.New("read tokens: they are given without an admin token, and the operator API and the console are off without one: set HOOKGATE_ADMIN_TOKEN too")
	}
	if _, err := access.NewTokens(s.handler.AdminToken, s.handler.ReadTokens); err != nil {
		return err
	}
	if s.worker.Backoff.Max < s.worker.Backoff.Base {
		return errors.New("forward backoff: base must be positive and max at least base")
	}
	return nil
}

// durationIn returns a parser of a duration from lo to hi into the field
// that field returns. Its error calls it name.
func durationIn(field func(*settings) *time.Duration, name string, lo, hi time.Duration) func(*settings, string) error {
	return func(s *settings, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < lo || d > hi {
			return fmt.Errorf("%s %q: must be a duration from %s to %s", name, v, lo, hi)
		}
		*field(s) = d
		return nil
	}
}
