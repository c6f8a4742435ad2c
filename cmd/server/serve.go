package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/hookgate/hookgate/internal/authlimit"
	"github.com/hookgate/hookgate/internal/config"
	"github.com/hookgate/hookgate/internal/console"
	"github.com/hookgate/hookgate/internal/dedup"
	"github.com/hookgate/hookgate/internal/forward"
	"github.com/hookgate/hookgate/internal/forward/transport"
	"github.com/hookgate/hookgate/internal/handler"
	"github.com/hookgate/hookgate/internal/heapfloor"
	"github.com/hookgate/hookgate/internal/queue"
	"github.com/hookgate/hookgate/internal/retention"
	"github.com/hookgate/hookgate/internal/sender"
	"github.com/hookgate/hookgate/internal/sigtoken"
	"github.com/hookgate/hookgate/internal/store"
	"github.com/hookgate/hookgate/internal/traffic"
	"github.com/hookgate/hookgate/migrations"
)

// serve runs the gateway until ctx is done, then shuts it down gracefully.
// Each step is a function below.
func serve(ctx context.Context, s *settings, log *slog.Logger) error {
	// The garbage collector's pace: the container's memory limit, then a
	// floor under the heap's goal (capped at half of that limit).
	limit, err := memlimit.Set(memlimit.WithProvider(memlimit.FromCgroup))
	switch {
	case err != nil && !errors.Is(err, memlimit.ErrCgroupsNotSupported):
		log.Warn("the container's memory limit could not be read; the Go memory limit is left as it was", "err", err)
	case err == nil && limit > 0 && limit < math.MaxInt64:
		log.Info("Go memory limit", "bytes", limit)
	}
	defer heapfloor.Start(s.heapFloor)()
	// From here on a SIGHUP never ends the process. Once serving, it
	// reloads the configuration.
	hup, stopHUP := notifySIGHUP()
	defer stopHUP()
	snap, err := loadSenders(s, log)
	if err != nil {
		return err
	}
	// Every component reads the configuration in force from senders.
	senders := sender.NewLive(snap)
	db, err := openDatabase(ctx, s.databaseURL)
	if err != nil {
		return err
	}
	defer db.close()
	jobs := queue.NewJobs(db.pool)
	if err := migrate(ctx, db, log); err != nil {
		return err
	}
	checkCollation(ctx, db.pool, log)
	if db.citus, err = dedup.InspectCitus(ctx, db.pool); err != nil {
		return err
	}
	if db.traffic, err = traffic.New(traffic.Config{Queries: db.queries, Log: log}); err != nil {
		return err
	}
	reg := newRegistry(db, jobs, senders)
	fwd, err := newForwarding(db, jobs, senders, s, reg, log)
	if err != nil {
		return err
	}
	defer func() { _ = fwd.closeFast(context.WithoutCancel(ctx)) }() // returns at once after shutdown's
	// The operators' pauses hold from the first forward on.
	if err := fwd.pauses.Load(ctx); err != nil {
		return err
	}
	deliveries, err := newIngestStore(ctx, db, s, reg, log)
	if err != nil {
		return err
	}
	rl := newReloader(s, senders, fwd.fixed, reg, log)
	rl.applied = append(rl.applied, fwd.applyConfig)
	rl.audit = func(ctx context.Context, e store.AuditEntry) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := db.queries.RecordAudit(ctx, e); err != nil {
			log.Error("audit trail: a reload could not be recorded", "token", e.Token, "err", err)
		}
	}
	api, err := newAPI(db, jobs, senders, deliveries, fwd, rl, s, reg, log)
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return serveUntilDone(ctx, ln, api, db, fwd, rl, hup, s, log)
}

// loadSenders reads, validates and compiles the senders configuration. It
// refuses the example's published secrets, see [checkExampleSecrets], and
// targets whose host --forward-allowed-hosts does not allow.
func loadSenders(s *settings, log *slog.Logger) (*sender.Snapshot, error) {
	snap, err := sender.LoadSnapshot(s.configPath, time.Now())
	if err != nil {
		return nil, err
	}
	if err := checkExampleSecrets(snap.Config(), s, log); err != nil {
		return nil, err
	}
	if err := s.allowedHosts.CheckTargets(snap.Config()); err != nil {
		return nil, err
	}
	return snap, nil
}

// migrate applies the pending migrations under an advisory lock, on the
// process's pool: they open no session of their own.
func migrate(ctx context.Context, db *database, log *slog.Logger) error {
	n, err := migrations.UpDB(ctx, db.sql)
	if err != nil {
		return err
	}
	log.Info("migrations applied", "count", n)
	return nil
}

// database is the process's connections and what reads through them.
type database struct {
	pool *pgxpool.Pool
	// sql is database/sql over pool, for the migrations.
	sql     *sql.DB
	queries *store.Queries
	// traffic counts deliveries and forwards for the console's charts.
	traffic *traffic.Recorder
	// citus is the database's Citus setup, inspected once the tables are
	// migrated. It is the zero Citus on plain PostgreSQL.
	citus dedup.Citus
	// routes sends the ingest calls straight to the Citus workers, or is
	// nil.
	routes *dedup.Routes
}

// openDatabase connects to url.
func openDatabase(ctx context.Context, url string) (*database, error) {
	pool, err := newPool(ctx, url)
	if err != nil {
		return nil, err
	}
	return &database{pool: pool, sql: stdlib.OpenDBFromPool(pool), queries: store.New(pool)}, nil
}

func (db *database) close() {
	if db.routes != nil {
		db.routes.Close()
	}
	db.sql.Close()
	db.pool.Close()
}

// newRegistry returns the Prometheus registry /metrics serves. It holds the
// Go runtime's, the process's, the pool's and the forward backlog's
// collectors.
func newRegistry(db *database, jobs *queue.Jobs, senders config.Source) *prometheus.Registry {
	names := func() []string {
		cfg := senders.Current()
		out := make([]string, 0, len(cfg.Senders))
		for i := range cfg.Senders {
			out = append(out, cfg.Senders[i].Name)
		}
		return out
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newPoolCollector(db.pool), forward.NewBacklogCollector(jobs, names))
	return reg
}

// forwarding is the forwards' side of the process. Its River queue inserts
// forward jobs, and works them and the retention job when work is set.
type forwarding struct {
	queue *queue.River
	work  bool
	// fast is the dispatcher of first attempts in a --role all process with
	// the fast path on, or nil.
	fast *forward.Dispatcher
	// handedOver is signalled when the fast path leaves rows to the relay,
	// which then looks at once. It is nil without a fast path.
	handedOver chan struct{}
	// takeover writes this process's heartbeat and takes over the jobs of
	// processes that are gone. It is nil when the process works no
	// forwards. It runs from before River works jobs until after River has
	// stopped, so that no job this process runs is taken for a dead one's.
	takeover     *forward.Takeover
	stopTakeover func(context.Context)
	// transports send the forwards (HTTP, and the brokers' connections,
	// closed once nothing forwards any more); nil for the api role.
	transports *transport.Router
	// reg is where the relay registers its metric.
	reg prometheus.Registerer
	// pauses are the operators' pauses of targets. Every process reads
	// them, and a worker's Gate holds them. The operator API and the
	// console poke them when they pause or resume a target.
	pauses  *forward.Pauses
	metrics *forward.Metrics
	// gate admits the process's forwards, or is nil when it works none.
	gate *forward.Gate
	// fixed is what the River client took from the configuration at
	// start. A reload cannot change it.
	fixed fixedAtStart
	// jobs wakes the forwards of the targets a reload adds. Shutdown waits
	// for the wakes under way.
	jobs  *queue.Jobs
	wakes sync.WaitGroup
	log   *slog.Logger
}

// wakeTimeout bounds the wake of a target's held forwards after a reload,
// see [forward.WakeTarget].
const wakeTimeout = 10 * time.Second

// applyConfig makes the forwarding follow a reloaded configuration. New
// targets get their metric series at once. Each target's max_in_flight and
// breaker_threshold apply from its next admission. The forwards held for a
// target configured again are woken in the background.
func (f *forwarding) applyConfig(to *sender.Snapshot, c config.Changes) {
	f.metrics.Init(to.Config())
	if f.gate != nil {
		f.gate.Reconfigure(to.Config())
	}
	for _, n := range c.TargetsAdded {
		f.wakes.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
			defer cancel()
			if err := forward.WakeTarget(ctx, f.jobs, n.Sender, n.Target); err != nil {
				f.log.Warn("wake the forwards held for a target the reload configured; they come back when their wait ends",
					"sender", n.Sender, "target", n.Target, "err", err)
			}
		})
	}
}

// startTakeover writes the process's first heartbeat and runs the takeover.
// stopTakeover ends it once and deletes the process's row; later calls do
// nothing. It is a no-op for a process that works no forwards.
func (f *forwarding) startTakeover(ctx context.Context, log *slog.Logger) {
	f.stopTakeover = func(context.Context) {}
	if f.takeover == nil {
		return
	}
	if err := f.takeover.Heartbeat(ctx); err != nil {
		log.Warn("forward heartbeat failed; retried every second", "err", err)
	}
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.takeover.Run(tctx)
	}()
	var once sync.Once
	f.stopTakeover = func(ctx context.Context) {
		once.Do(func() {
			cancel()
			<-done
			if err := f.takeover.Stop(ctx); err != nil {
				log.Warn("delete this process's heartbeat; its jobs are taken over once it is stale", "err", err)
			}
		})
	}
}

// relayConfig returns the relay's configuration. With a fast path, the
// fast path leases nearly every row. So the relay waits its idle interval
// after a look that moved nothing, and the fast path wakes it when it
// leaves rows.
func (f *forwarding) relayConfig() forward.RelayConfig {
	rc := forward.DefaultRelayConfig()
	rc.Registerer = f.reg
	if f.handedOver != nil {
		rc.Wake = f.handedOver
	}
	if f.fast != nil {
		rc.IdleInterval = forward.DefaultRelayIdleInterval
	}
	return rc
}

// closeFast stops the fast path and lets its forwards finish until ctx
// ends. It is a no-op without a fast path or once it is closed.
func (f *forwarding) closeFast(ctx context.Context) error {
	if f.fast == nil {
		return nil
	}
	return f.fast.Close(ctx)
}

// newForwarding returns the process's forwarding. A worker or all role
// works forwards; the api role only inserts them.
func newForwarding(db *database, jobs *queue.Jobs, cfg config.Source, s *settings, reg *prometheus.Registry, log *slog.Logger) (*forwarding, error) {
	work := s.role == roleAll || s.role == roleWorker
	m := forward.NewMetrics(reg)
	m.Init(cfg.Current()) // every target's series from the start
	m.CountTraffic(db.traffic)
	cc, err := forwardClientConfig(db, jobs, cfg, s, log)
	if err != nil {
		return nil, err
	}
	pc := forward.DefaultPausesConfig()
	pc.Wake, pc.DB, pc.Jobs, pc.Senders, pc.Registerer, pc.Log = work, db.pool, jobs, cfg.Current(), reg, log
	pauses, err := forward.NewPauses(pc)
	if err != nil {
		return nil, err
	}
	var (
		worker     *forward.Worker // nil for the api role
		gate       *forward.Gate
		takeover   *forward.Takeover
		transports *transport.Router
		wake       chan struct{}
	)
	if work {
		cc.ID = forward.NewProcessID()
		tc := forward.DefaultTakeoverConfig(cc.ID)
		tc.DB, tc.Jobs, tc.Registerer, tc.Log = db.pool, jobs, reg, log
		if takeover, err = forward.NewTakeover(tc); err != nil {
			return nil, err
		}
		cc.Tracker = takeover
		// The relay looks at once when the fast path leaves rows to it, or
		// when an ordered forward's end releases the next of its key.
		wake = make(chan struct{}, 1)
		if worker, gate, transports, err = newForwardWorker(db, jobs, cfg, s, m, pauses, wake, log); err != nil {
			return nil, err
		}
		cc.Worker = worker
	}
	q, err := queue.New(cc)
	if err != nil {
		return nil, err
	}
	f := &forwarding{queue: q, work: work, takeover: takeover, transports: transports, reg: reg, metrics: m, gate: gate, jobs: jobs, log: log, pauses: pauses,
		handedOver: wake}
	if work {
		f.fixed = fixedAtStart{work: true, rescueAfter: cc.RescueAfter, computed: s.client.RescueAfter == 0, jobRetention: cc.Retention}
	}
	if work && s.role == roleAll && s.fastPath {
		// The fast path shares the River worker's HTTP client and Gate, so
		// fair shares, max_in_flight and breakers hold across both. It
		// records its outcomes through the queue.
		dc := s.dispatcher // FixedLease 0: each target's timeout plus the margin
		dc.HandedOver = f.handedOver
		dc.Worker, dc.Recorder, dc.Registerer, dc.Log = worker, q, reg, log
		if f.fast, err = forward.NewDispatcher(dc); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// newForwardWorker returns the process's forward worker: a Gate of the
// settings (--forward-workers forwards at once, the default breakers,
// holding the targets pauses says are paused), its
// transports (an HTTP client keeping as many idle connections per target,
// and the brokers' connections, all to the allowed hosts only), and the
// retry schedule of the settings.
func newForwardWorker(db *database, jobs *queue.Jobs, cfg config.Source, s *settings, m *forward.Metrics, pauses *forward.Pauses, released chan<- struct{}, log *slog.Logger) (*forward.Worker, *forward.Gate, *transport.Router, error) {
	gc := s.gate
	gc.DB, gc.Jobs, gc.Metrics, gc.Log, gc.Pauses = db.pool, jobs, m, log, pauses
	gate, err := forward.NewGate(gc)
	if err != nil {
		return nil, nil, nil, err
	}
	wc := s.worker
	wc.Senders, wc.DB, wc.Jobs, wc.Gate, wc.Metrics, wc.Log, wc.Released = cfg, db.pool, jobs, gate, m, log, released
	client := transport.NewGuardedHTTPClient(gc.Capacity, s.allowedHosts)
	ts := transport.NewRouter(client, s.allowedHosts.DialContext(&net.Dialer{}), time.Now)
	wc.Transport = ts
	w, err := forward.NewWorker(wc)
	if err != nil {
		ts.Close()
		return nil, nil, nil, err
	}
	return w, gate, ts, nil
}

// forwardClientConfig returns the River client's configuration from the
// settings, with its dependencies but the worker. [queue.DefaultClientConfig]
// computes the finished jobs' retention from the senders, and the rescue
// horizon when --forward-rescue-after is unset. The retention job is its
// maintenance.
func forwardClientConfig(db *database, jobs *queue.Jobs, cfg config.Source, s *settings, log *slog.Logger) (queue.ClientConfig, error) {
	cc, computed := s.client, queue.DefaultClientConfig(cfg.Current())
	cc.Retention = computed.Retention
	if cc.RescueAfter == 0 { // unset: computed from the targets
		cc.RescueAfter = computed.RescueAfter
	}
	cc.Pool, cc.Senders, cc.Log = db.pool, cfg, log
	cc.Distributed = db.citus.Distributed
	rc := s.retention
	rc.DB, rc.Forwards, rc.Senders, rc.Log = db.pool, jobs, cfg, log
	rw, err := retention.NewWorker(rc)
	if err != nil {
		return cc, err
	}
	cc.Maintenance = rw.Maintenance() // worked only by a client with a worker
	return cc, nil
}

// newIngestStore returns the store of the ingest transaction, configured
// by the settings, with batch sizes observed in reg. When
// processed_messages is distributed, it uses the statement forms Citus
// routes to one shard.
func newIngestStore(ctx context.Context, db *database, s *settings, reg *prometheus.Registry, log *slog.Logger) (*dedup.Store, error) {
	citus := db.citus
	delegated := false
	if citus.Distributed {
		var err error
		if delegated, err = dedup.DelegatedFunction(ctx, db.pool, handler.IngestFunctionName); err != nil {
			return nil, err
		}
		if delegated {
			log.Info("citus: processed_messages is distributed and " + handler.IngestFunctionName + " is delegated to the sender's worker: one call per ingest transaction")
		} else {
			log.Warn("citus: processed_messages is distributed but " + handler.IngestFunctionName + " is not (run its line of migrations/citus/distribute.sql, see docs/distributed.md): " +
				"ingest uses the statement forms Citus routes to one shard, a round trip to the worker per statement")
		}
		if !delegated && citus.PropagateSetCommands != "local" {
			log.Warn("citus: citus.propagate_set_commands is not 'local', so the in-flight wait (SET LOCAL lock_timeout) does not reach the workers: "+
				"a delivery whose key another transaction holds waits until that transaction ends instead of getting 409; "+
				"set it for hookgate's role or database (ALTER ROLE … SET citus.propagate_set_commands = 'local'), see docs/distributed.md",
				"citus.propagate_set_commands", citus.PropagateSetCommands)
		}
	}
	batchSizes := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "hookgate_ingest_batch_size",
		Help:    "Deliveries of one sender committed together in one ingest transaction (group commit).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
	})
	reg.MustRegister(batchSizes)
	queueWait := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "hookgate_ingest_store_queue_seconds",
		Help:    "Time a delivery queued for the database (a batch slot of its sender and a connection) before its transaction, or before it gave up.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	})
	reg.MustRegister(queueWait)
	cfg := ingestConfig(s, citus.Distributed, batchSizes, queueWait)
	cfg.Pool = db.pool
	if delegated {
		cfg.Delegated = handler.IngestFunction()
		if s.onWorkers {
			r, err := dedup.NewRoutes(ctx, db.pool, dedup.RoutesConfig{Workers: s.citusWorkers, Log: log})
			switch {
			case errors.Is(err, dedup.ErrWorkersUnverified):
				log.Warn("citus: ingest calls go through the coordinator, not straight to the workers: the gateway sends DATABASE_URL's password and the deliveries to a worker " +
					"only when --citus-worker-hosts (HOOKGATE_CITUS_WORKER_HOSTS) lists it, or, with none listed, when DATABASE_URL has sslmode=verify-full; see docs/distributed.md")
			case err != nil:
				return nil, err
			default:
				db.routes, cfg.Routes = r, r
				log.Info("citus: ingest calls go straight to the worker that holds the sender's shards", "workers", r.Workers())
			}
		}
	}
	return dedup.New(cfg)
}

// distributedMaxInFlight is the default of --ingest-batches-in-flight on
// Citus. One batch of a sender at a time makes the next batch larger. Each
// batch costs Citus a call of the ingest function on the worker. With one
// batch in flight, make bench-citus measured about 15 deliveries per
// transaction against 8 with two, and more deliveries per second. See
// docs/benchmarks/2026-citus.md.
const distributedMaxInFlight = 1

// ingestConfig returns the ingest store's configuration from s.dedup,
// which it does not change. The Citus layout decides the statement forms,
// and the batches in flight unless set. It adds the observers of batch
// sizes and queueing delays.
func ingestConfig(s *settings, distributed bool, batchSizes, queueWait prometheus.Observer) dedup.Config {
	cfg := s.dedup
	b, p := *cfg.Batching, *cfg.Shedding // copies: s keeps its own
	if b.MaxInFlight == 0 {
		b.MaxInFlight = dedup.DefaultMaxInFlight
		if distributed {
			b.MaxInFlight = distributedMaxInFlight
		}
	}
	b.Observe = func(n int) { batchSizes.Observe(float64(n)) }
	p.Observe = func(d time.Duration) { queueWait.Observe(d.Seconds()) }
	cfg.Batching, cfg.Shedding = &b, &p
	cfg.Layout = dedup.LayoutPlain
	if distributed {
		cfg.Layout = dedup.LayoutDistributed
	}
	return cfg
}

// newAPI returns the HTTP server of ingest, the operator API, the console
// and the service endpoints.
func newAPI(db *database, jobs *queue.Jobs, senders *sender.Live, deliveries *dedup.Store, fwd *forwarding, rl *reloader, s *settings, reg *prometheus.Registry, log *slog.Logger) (*handler.Server, error) {
	// The console shares the operator API's limit on wrong tokens.
	limiter := authlimit.New(s.console.TrustedProxies...)
	redeliverer := fwd.queue
	cc := s.console
	cc.Senders, cc.Queries, cc.Forwards, cc.Log = senders, db.queries, jobs, log
	cc.Limiter, cc.Redeliverer, cc.Pauses = limiter, redeliverer, fwd.pauses
	cons, err := console.New(cc)
	if err != nil {
		return nil, err
	}
	hc := s.handler
	hc.Senders, hc.Ingest, hc.Ready, hc.Registry, hc.Log = senders, deliveries, readiness(db.pool, db.sql), reg, log
	hc.Queries, hc.Redeliverer, hc.AuthLimiter, hc.Console, hc.Traffic = db.queries, redeliverer, limiter, cons, db.traffic
	hc.Forwards = jobs
	hc.Tokens = sigtoken.New(db.pool)
	hc.Pauses = fwd.pauses
	hc.Reloader = rl
	if fwd.fast != nil { // a nil *forward.Dispatcher would be a non-nil FastPath
		hc.FastPath = fwd.fast
	}
	return handler.New(hc)
}

// readTimeout bounds the reading of a request's headers and body. It is
// the HTTP server's ReadTimeout and [handler.Config].BodyReadTimeout.
const readTimeout = handler.DefaultBodyReadTimeout

// newHTTPServer returns the main listener's server. It serves the whole
// API, or only the service endpoints for the worker role.
func newHTTPServer(api *handler.Server, s *settings, log *slog.Logger) *http.Server {
	router := api.Router()
	if s.role == roleWorker {
		router = api.ServiceRouter()
	}
	return &http.Server{
		Handler:           router,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       readTimeout,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    netHTTPMaxHeaderBytes(s.maxHeaderBytes),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// serveUntilDone serves on ln, and on the profiler's and metrics'
// listeners when set. A worker process also works forwards and relays the
// outbox. Everything shuts down when ctx is done.
func serveUntilDone(ctx context.Context, ln net.Listener, api *handler.Server, db *database, fwd *forwarding, rl *reloader, hup <-chan os.Signal, s *settings, log *slog.Logger) error {
	httpSrv := newHTTPServer(api, s, log)
	fwd.startTakeover(ctx, log)
	defer fwd.stopTakeover(ctx) // after shutdown's, a no-op
	if fwd.work {
		// Jobs get a context of their own, so that a shutdown lets running
		// forwards finish before cancelling them.
		if err := fwd.queue.Start(context.WithoutCancel(ctx)); err != nil {
			ln.Close()
			return fmt.Errorf("start forward workers: %w", err)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	if s.pprofAddr != "" {
		if err := servePprof(gctx, g, s.pprofAddr, log); err != nil {
			ln.Close()
			return err
		}
	}
	if s.metricsAddr != "" {
		if err := serveMetrics(gctx, g, s.metricsAddr, api.MetricsHandler(), log); err != nil {
			ln.Close()
			return err
		}
	}
	// Logged once every listener is bound, so that whoever waits for this
	// line can reach /metrics at once.
	log.Info("listening", "addr", ln.Addr().String(), "role", s.role, "senders", len(rl.live.Current().Senders), "version", buildVersion())
	if fwd.work {
		// Worker processes relay the outbox into River's job table.
		rc := fwd.relayConfig()
		rc.Pool, rc.Queue, rc.Senders, rc.Log = db.pool, fwd.queue, rl.live, log
		rc.Distributed = db.citus.Distributed
		relay, err := forward.NewRelay(rc)
		if err != nil {
			ln.Close()
			return err
		}
		g.Go(func() error {
			relay.Run(gctx)
			return nil
		})
	}
	g.Go(func() error {
		db.traffic.Run(gctx, traffic.DefaultInterval)
		return nil
	})
	g.Go(func() error {
		fwd.pauses.Run(gctx)
		return nil
	})
	g.Go(func() error {
		rl.onSIGHUP(gctx, hup)
		return nil
	})
	if s.configWatch {
		g.Go(func() error {
			rl.watch(gctx, watchEvery)
			return nil
		})
	}
	g.Go(func() error {
		if err := httpSrv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		return shutdown(ctx, httpSrv, fwd, s.shutdownWait, log)
	})
	err := g.Wait()
	fwd.wakes.Wait() // bounded by wakeTimeout
	// Store what was counted while shutting down.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	if ferr := db.traffic.Flush(fctx); ferr != nil {
		log.Warn("traffic counts not stored at shutdown", "err", ferr)
	}
	cancel()
	log.Info("stopped")
	return err
}

// shutdown lets in-flight requests and running forwards finish within
// wait. Forwards still running then are cancelled, and the next worker
// retries them.
func shutdown(ctx context.Context, httpSrv *http.Server, fwd *forwarding, wait time.Duration, log *slog.Logger) error {
	log.Info("shutting down: finishing in-flight requests and forwards", "timeout", wait)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	var errs []error
	if err := httpSrv.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("shutdown http: %w", err))
	}
	// Fast-path forwards finish and are recorded. Those cut short go to the
	// relay.
	if err := fwd.closeFast(sctx); err != nil {
		log.Warn("fast path: forwards still running at the end of the grace period were handed to the retry queue", "err", err)
	}
	if !fwd.work {
		return errors.Join(errs...)
	}
	if err := fwd.queue.Stop(sctx); err != nil {
		log.Warn("forwards still running at the end of the grace period: cancelling them", "err", err)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := fwd.queue.StopAndCancel(cctx); err != nil {
			errs = append(errs, fmt.Errorf("stop forward workers: %w", err))
		}
	}
	// River works no job any more. The heartbeat stops, so the other
	// processes can take over what is left at once.
	fwd.stopTakeover(ctx)
	if fwd.transports != nil {
		fwd.transports.Close() // closes the brokers' connections
	}
	return errors.Join(errs...)
}
