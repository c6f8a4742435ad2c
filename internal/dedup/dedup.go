package dedup

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"golang.org/x/sync/singleflight"

	"github.com/hookgate/hookgate/internal/idempotency"
)

// DefaultInFlightWait is how long a delivery waits for a concurrent delivery
// of the same key to finish before Run gives up with ErrInFlight.
const DefaultInFlightWait = 3 * time.Second

// Store runs deliveries against PostgreSQL.
type Store struct {
	db      Querier
	acquire func(ctx context.Context) (*pgx.Conn, func(), error)
	// setLockTimeout is the in-flight wait, as a statement of the
	// delivery's transaction.
	setLockTimeout string
	// inFlightWait and batchWait are the in-flight wait of a delivery and
	// of a batch as lock_timeout values ('3000ms'), for the delegated
	// function.
	inFlightWait, batchWait string
	encoders                sync.Pool // of *encoders

	// delegated is [Config.Delegated], used on a distributed layout.
	delegated *delegation
	// routes is Config.Routes: where the delegated calls go; nil: Pool.
	routes *Routes

	// Group commit is off when maxBatch is at most 1.
	maxBatch, maxInFlight int
	overlapAfter          time.Duration
	observeBatch          func(int)
	batchLockTimeout      string
	batchers              sync.Map // sender → *batcher
	flight                singleflight.Group

	// shed is nil without shedding on delay.
	shed *shedder

	// layout is whether the tables are distributed by sender (Citus): see
	// Config.Layout; unknown until set or found by the first delivery.
	layout atomic.Int32

	// cache is nil without the replay cache.
	cache    *lru.Cache[idempotency.Key, cached]
	cacheTTL time.Duration
	now      func() time.Time
}

// MaxInFlightWait is the longest in-flight wait New accepts.
const MaxInFlightWait = time.Hour

// New returns a Store on cfg.Pool configured by cfg (DefaultConfig has
// hookgate serve's defaults); an error naming the field when cfg is
// invalid (a nil Pool included).
func New(cfg Config) (*Store, error) {
	s, err := newStore(cfg)
	if err != nil {
		return nil, err
	}
	pool := cfg.Pool
	s.acquire = func(ctx context.Context) (*pgx.Conn, func(), error) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		return c.Conn(), c.Release, nil
	}
	return s, nil
}

// newStore returns a Store on cfg.Pool configured by cfg, without its
// acquire.
func newStore(cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	wait := (cfg.InFlightWait + time.Millisecond - 1) / time.Millisecond * time.Millisecond // never 0, which would mean "wait forever"
	s := &Store{
		db:               cfg.Pool,
		setLockTimeout:   lockTimeoutSQL(wait),
		batchLockTimeout: lockTimeoutSQL(min(wait, batchLockWait)),
		inFlightWait:     lockTimeoutValue(wait),
		batchWait:        lockTimeoutValue(min(wait, batchLockWait)),
		encoders:         sync.Pool{New: func() any { return &encoders{} }},
		now:              time.Now,
	}
	if b := cfg.Batching; b != nil {
		s.maxBatch, s.maxInFlight, s.overlapAfter, s.observeBatch = b.MaxBatch, b.MaxInFlight, b.OverlapAfter, b.Observe
	}
	if r := cfg.ReplayCache; r != nil {
		c, err := lru.New[idempotency.Key, cached](r.Size)
		if err != nil {
			return nil, fmt.Errorf("dedup config: ReplayCache.Size %d: %w", r.Size, err)
		}
		s.cache, s.cacheTTL = c, r.TTL
	}
	if p := cfg.Shedding; p != nil {
		s.shed = &shedder{policy: *p, now: time.Now}
	}
	s.layout.Store(int32(cfg.Layout))
	if cfg.Delegated != nil {
		s.delegated = newDelegation(cfg.Delegated)
		s.routes = cfg.Routes
	}
	return s, nil
}

// The pipeline's transaction and its retry after an expired key.
const (
	beginSQL  = "BEGIN"
	commitSQL = "COMMIT"
	// forgetExpiredSQL removes a key whose retention has passed, found by a
	// conflicting claim before the retention job deleted it, so that the
	// claim can be retried and the delivery treated as new. It runs after
	// forgetSettingsSQL, in one implicit transaction: the InitPlan probes
	// the key's index in its order (the key compared as a range, as
	// storedSQL compares it), and the DELETE takes the row by its ctid.
	// Compared by equality in the DELETE itself, the key was served as well
	// by an index whose first column is the sender, which checks the
	// delivery ID on each of the sender's entries, and PostgreSQL chose it
	// when its statistics said the sender's keys were one row. Nothing
	// updates a key, so the DELETE takes the row the InitPlan found expired,
	// if it is still there. sender = $1 routes it to one shard on Citus.
	forgetExpiredSQL = `WITH gone AS (
  DELETE FROM processed_messages WHERE sender = $1 AND ctid = ANY(ARRAY(
    SELECT ctid FROM processed_messages
    WHERE sender = $1 AND delivery_id >= $2 AND delivery_id <= $2 AND expires_at <= $3 ORDER BY delivery_id))
  RETURNING 1)
SELECT count(*) FROM gone`
	// forgetSettingsSQL disables, for the rest of the transaction, every
	// scan but by ctid, and sorts: the InitPlan's probe of the key's index
	// in its order is then the plan with the fewest disabled paths, and the
	// DELETE's by ctid the one with none.
	forgetSettingsSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
  set_config('enable_indexscan', 'off', true), ` + probeSettings
)

// Run claims d's key and applies change in one transaction and one round
// trip, as the package documentation describes. A duplicate gets a Replayed
// result. A reused ID with another body gets [ErrPayloadMismatch], and a
// key held too long elsewhere [ErrInFlight]. After any other error nothing
// of the delivery is recorded. The exception is a connection lost during
// COMMIT, which may have committed all of it; a retry then replays.
//
// A retry this store saw committed may be answered from the replay cache
// ([Config.ReplayCache]). A copy of a delivery already running in this
// process waits for it and answers with its outcome. If that one failed for
// a reason of its own, the copy runs by itself. With [Config.Batching], d
// may share its transaction with other deliveries of its sender. With
// [Config.Shedding], d may be refused with an [*OverloadError] before it
// reaches the database.
func (s *Store) Run(ctx context.Context, d idempotency.Delivery, change Change) (Result, error) {
	if res, hit, err := s.fromCache(d); hit {
		return res, err
	}
	// Copies of a delivery in flight in this process wait for the first
	// copy's outcome here, before admission: they take no place in the
	// queue for the store and are never shed for it.
	v, err, _ := s.flight.Do(d.Sender+"\x00"+d.DeliveryID, func() (any, error) {
		res, err := s.runAdmitted(ctx, d, change)
		return flown{res: res, sum: d.RequestSHA256, eventID: d.EventID}, err
	})
	f, _ := v.(flown)
	switch {
	case f.eventID == d.EventID: // this call ran it
		return f.res, err
	case errors.Is(err, ErrOverloaded), errors.Is(err, ErrInFlight):
		// The copy would meet the same queue, or the same key held by
		// another process.
		return Result{}, err
	case err != nil:
		// The delivery this one waited for failed, maybe for a reason of its
		// own (another payload): run this one by itself.
		return s.runAdmitted(ctx, d, change)
	case f.sum != d.RequestSHA256:
		return Result{}, ErrPayloadMismatch
	default:
		return Result{Response: f.res.Response, EventID: f.res.EventID, Replayed: true}, nil
	}
}

// runAdmitted admits d into the queue for the store, or sheds it, and runs
// it: in a batch of its sender with group commit, by itself otherwise.
func (s *Store) runAdmitted(ctx context.Context, d idempotency.Delivery, change Change) (Result, error) {
	t, err := s.shed.admit()
	if err != nil {
		return Result{}, err
	}
	defer t.leave() // when it never reached the database
	ctx = withTicket(ctx, t)
	if s.maxBatch <= 1 {
		return s.runSingle(ctx, d, change, true)
	}
	return s.batcher(d.Sender).run(ctx, d, change)
}

// flown is the outcome of a delivery that concurrent deliveries of the same
// key in this process waited for.
type flown struct {
	res     Result
	sum     [32]byte
	eventID uuid.UUID
}

func (s *Store) batcher(sender string) *batcher {
	if b, ok := s.batchers.Load(sender); ok {
		return b.(*batcher)
	}
	b, _ := s.batchers.LoadOrStore(sender, &batcher{s: s})
	return b.(*batcher)
}

// runSingle runs d in a transaction of its own: with tryDelegated, and a
// delegated function on a distributed layout, first as one call of that
// function, then, when its key was held, in the statement forms, which
// read what holds it.
func (s *Store) runSingle(ctx context.Context, d idempotency.Delivery, change Change, tryDelegated bool) (Result, error) {
	res, err := s.runOnce(ctx, d, change, tryDelegated)
	if !errors.Is(err, errExpired) {
		return res, err
	}
	// The key's retention had passed: forget it and claim again, once.
	if err := s.forgetExpired(ctx, d); err != nil {
		return Result{}, fmt.Errorf("forget expired key: %w", err)
	}
	res, err = s.runOnce(ctx, d, change, true)
	if errors.Is(err, errExpired) {
		// Only a concurrent delivery that claimed, and expired, in between
		// could cause this; the sender's retry sorts it out.
		return Result{}, errors.New("claim delivery: key expired twice")
	}
	return res, err
}

// forgetExpired deletes d's key if its retention passed by d.ReceivedAt
// (forgetExpiredSQL), in one round trip and one implicit transaction.
func (s *Store) forgetExpired(ctx context.Context, d idempotency.Delivery) error {
	var b pgx.Batch
	b.Queue(forgetSettingsSQL)
	b.Queue(forgetExpiredSQL, d.Sender, d.DeliveryID, d.ReceivedAt)
	res := s.db.SendBatch(ctx, &b)
	_, err := res.Exec()
	if err == nil {
		var n int64
		err = res.QueryRow().Scan(&n)
	}
	if err != nil {
		_ = res.Close()
		return err
	}
	return res.Close()
}

// stored is the row read by storedSQL.
type stored struct {
	found   bool
	sum     []byte
	eventID uuid.UUID
	resp    idempotency.Response
	expires time.Time
}

func (s *Store) runOnce(ctx context.Context, d idempotency.Delivery, change Change, tryDelegated bool) (Result, error) {
	if err := s.detectLayout(ctx); err != nil {
		return Result{}, err
	}
	if tryDelegated && s.delegating() {
		res, claimed, err := s.runDelegated(ctx, d, change)
		if err != nil || claimed {
			return res, err
		}
		// The key is held (or the change has a statement the function
		// does not perform): the statement forms read what holds it.
	}
	p, err := s.plan([]idempotency.Delivery{d}, []Change{change}, s.setLockTimeout, false)
	if err != nil {
		return Result{}, err
	}
	conn, release, err := s.acquireQueued(ctx, ticketOf(ctx))
	if err != nil {
		return Result{}, fmt.Errorf("claim delivery: acquire connection: %w: %w", ErrUnavailable, err)
	}
	defer release()
	res, err := s.pipeline(ctx, conn, p)
	if err == nil {
		err = res.failure(p)
	}
	var out outcome
	switch {
	case errors.Is(err, errClaimConflict):
		// A database that reports the conflict as an error despite ON
		// CONFLICT: the transaction rolled back, read what holds the key,
		// on the same connection.
		var rows []stored
		if rows, err = s.readHeld(ctx, conn, []idempotency.Delivery{d}, []bool{false}); err == nil {
			out.row = rows[0]
		}
	case err == nil:
		out = readBack(d, res.rows[0])
	}
	if err != nil {
		return Result{}, err
	}
	return s.result(d, out)
}

// outcome is what the pipeline found for one delivery.
type outcome struct {
	claimed bool   // the claim inserted the key: the key's row holds d's event ID
	row     stored // the row that holds the key when claimed is false
}

// readBack decides d's outcome by the row the pipeline read back for its
// key: its own event ID means its claim took the key (EventID is fresh);
// another's means a duplicate; none means the key vanished in between.
func readBack(d idempotency.Delivery, row stored) outcome {
	if row.found && row.eventID == d.EventID {
		return outcome{claimed: true}
	}
	return outcome{row: row}
}

// result turns the outcome of d's committed claim into Run's answer, and
// remembers what holds the key in the replay cache.
func (s *Store) result(d idempotency.Delivery, o outcome) (Result, error) {
	switch {
	case o.claimed:
		s.remember(d.Key, d.Response, d.EventID, d.RequestSHA256[:], d.ExpiresAt)
		return Result{Response: d.Response, EventID: d.EventID}, nil
	case !o.row.found:
		// The key expired and was deleted between the claim and the read;
		// the sender's retry will be accepted as new.
		return Result{}, errors.New("read stored delivery: key vanished after conflict")
	}
	row := o.row
	if !row.expires.After(d.ReceivedAt) {
		return Result{}, errExpired
	}
	s.remember(d.Key, row.resp, row.eventID, row.sum, row.expires)
	if !bytes.Equal(row.sum, d.RequestSHA256[:]) {
		return Result{}, ErrPayloadMismatch
	}
	return Result{Response: row.resp, EventID: row.eventID, Replayed: true}, nil
}

// plan is a pipeline's statements: BEGIN, the lock timeout, the claim
// (with the foldable statements of the changes in it, on PostgreSQL), the
// changes' other multi-row statements, each delivery's own statements, and,
// for a single delivery, the read of the stored row. A batch has no read:
// its claim returns the keys it inserted, and what holds the others is read
// after the COMMIT, in one statement for all of them ([Store.readHeld]).
type plan struct {
	stmts []statement
	ds    []idempotency.Delivery
	n     int // deliveries
	claim int // statement index of the claim
	// changes and changesEnd bound the statements of the changes. read is
	// the read's index, -1 for none.
	changes, changesEnd, read int
	// returning: the claim returns the keys it inserted, and there is no
	// read.
	returning bool
	// folded: statements of the change run inside the claim's statement
	// ([Foldable]).
	folded bool
	// autocommit: the pipeline is one delegated call outside a transaction
	// block, without BEGIN and COMMIT.
	autocommit bool
}

// plan lays out the pipeline of deliveries ds, all of one sender, with
// their changes.
func (s *Store) plan(ds []idempotency.Delivery, changes []Change, lockTimeout string, batch bool) (*plan, error) {
	n := len(ds)
	sender := ds[0].Sender
	claim, err := claimColumns(ds)
	if err != nil {
		return nil, err
	}
	groups, own, err := collectChanges(sender, n, changes)
	if err != nil {
		return nil, err
	}
	stmts := make([]statement, 0, 8)
	stmts = append(stmts, statement{sql: beginSQL}, statement{sql: lockTimeout})
	returning, folded := false, false
	if s.layout.Load() != layoutDistributed {
		var c statement
		c, groups = foldClaim(sender, claim, groups)
		folded = c.sql != claimReturningSQL
		// A batch's claim returns the keys it inserted (a single
		// delivery's returns its key too, unread: it reads what holds it).
		returning = batch
		stmts = append(stmts, statement{sql: pipelineSettingsSQL}, c)
	} else {
		// Citus routes a multi-row INSERT … VALUES whose rows all name $1 to
		// the sender's shard.
		args := make([]any, 0, 1+8*n)
		args = append(args, sender)
		for i := range ds {
			for _, c := range claim {
				args = append(args, c.(column)[i])
			}
		}
		sql := claimValuesSQL(n)
		if returning = batch; returning {
			sql = claimValuesReturningSQL(n)
		}
		stmts = append(stmts, statement{sql: sql, args: args})
	}
	p := &plan{ds: ds, n: n, claim: len(stmts) - 1, changes: len(stmts), read: -1, returning: returning, folded: folded}
	stmts = append(stmts, groups...)
	stmts = append(stmts, own...)
	p.changesEnd = len(stmts)
	if !returning {
		p.read = len(stmts)
		stmts = append(stmts, statement{sql: storedSQL, args: []any{sender, claim[0], claim[2]}})
	}
	p.stmts = stmts
	return p, nil
}

// claimColumns returns the claim's eight columns of ds, in claimSQL's
// order, with one value per delivery. It fails when ds are not all of one
// sender.
func claimColumns(ds []idempotency.Delivery) ([]any, error) {
	n := len(ds)
	sender := ds[0].Sender
	var (
		ids, ctypes                 = make(column, n), make(column, n)
		sums, eventIDs, bodies      = make(column, n), make(column, n), make(column, n)
		statuses, received, expires = make(column, n), make(column, n), make(column, n)
	)
	for i, d := range ds {
		if d.Sender != sender {
			return nil, errors.New("claim delivery: one pipeline carries the deliveries of one sender")
		}
		body := d.Response.Body
		if body == nil {
			body = []byte{} // stored as an empty body, not NULL
		}
		ids[i], sums[i], eventIDs[i] = d.DeliveryID, d.RequestSHA256[:], [16]byte(d.EventID)
		statuses[i], ctypes[i], bodies[i] = int16(d.Response.Status), d.Response.ContentType, body
		received[i], expires[i] = d.ReceivedAt, d.ExpiresAt
	}
	return []any{ids, sums, eventIDs, statuses, ctypes, bodies, received, expires}, nil
}

// collectChanges runs the changes of n deliveries of sender and returns
// their statements. groups has one multi-row statement per sql given to
// [Batch.Row], in the order of first use. own has each delivery's own
// statements, in order.
func collectChanges(sender string, n int, changes []Change) (groups, own []statement, err error) {
	var b Batch
	// cols are the groups' columns, filled before they become the
	// groups' arguments: a column appended to in an []any would be boxed
	// again at every row.
	var cols [][]column
	for i := range changes {
		if changes[i] == nil {
			continue
		}
		b.stmts, b.rows = b.stmts[:0], b.rows[:0]
		changes[i](&b)
		for _, r := range b.rows {
			g := -1
			for at := range groups { // a few: a linear search
				if groups[at].sql == r.sql {
					g = at
					break
				}
			}
			if g < 0 {
				g = len(groups)
				c := make([]column, len(r.values))
				for j := range c {
					c[j] = make(column, 0, n)
				}
				cols = append(cols, c)
				groups = append(groups, statement{sql: r.sql})
			}
			c := cols[g]
			if len(r.values) != len(c) {
				return nil, nil, fmt.Errorf("apply state change: rows of one statement with %d and %d values", len(c), len(r.values))
			}
			for j, v := range r.values {
				c[j] = append(c[j], v)
			}
		}
		own = append(own, b.stmts...)
	}
	for g := range groups {
		args := make([]any, 1+len(cols[g]))
		args[0] = sender
		for j, c := range cols[g] {
			args[1+j] = c
		}
		groups[g].args = args
	}
	return groups, own, nil
}

// column is a multi-row statement's parameter: one value per row, sent as
// an array.
type column []any

// results are what a pipeline's statements returned.
type results struct {
	tags     []pgconn.CommandTag // by statement; the COMMIT's is last
	rows     []stored            // of the read, in delivery order
	claimed  []bool              // of a returning claim, in delivery order
	failed   error               // the first statement error
	failedAt int                 // its statement index
}

// failure returns the error of the pipeline's deliveries, nil when none of
// its statements failed.
func (r *results) failure(p *plan) error {
	if r.failed == nil {
		return nil
	}
	return classify(r.failed, r.failedAt, p)
}

// outcomes returns what the pipeline read back for each delivery of ds. It
// returns false when a key vanished between the claim and the read.
func (r *results) outcomes(ds []idempotency.Delivery) ([]outcome, bool) {
	out := make([]outcome, len(r.rows))
	for i, row := range r.rows {
		if !row.found {
			return nil, false
		}
		out[i] = readBack(ds[i], row)
	}
	return out, true
}

// pipeline sends p's statements, a Sync, then COMMIT and a second Sync, in
// one write and one round trip. When a statement fails, PostgreSQL skips
// the rest up to the first Sync, and the COMMIT after it rolls back. So the
// connection is idle again without another round trip. A statement's own
// error is returned in results.failed. A network error, after which the
// outcome of COMMIT is unknown, is returned as the error, as is a COMMIT
// that did not commit. A delegated call is one statement and a Sync, which
// commits it.
func (s *Store) pipeline(ctx context.Context, conn *pgx.Conn, p *plan) (*results, error) {
	stmts := p.stmts
	out := &results{tags: make([]pgconn.CommandTag, len(stmts)+1), rows: make([]stored, p.n), claimed: make([]bool, p.n), failedAt: -1}
	sds := make([]*pgconn.StatementDescription, len(stmts)+1)
	for i, st := range stmts {
		sd, err := conn.Prepare(ctx, st.sql, st.sql) // a map lookup once prepared on this connection
		if err != nil {
			return out, fmt.Errorf("prepare delivery statement %d: %w", i, unavailable(err))
		}
		sds[i] = sd
	}
	syncs := 2 // the statements' Sync, the COMMIT's
	if p.autocommit {
		syncs = 1
	} else {
		sd, err := conn.Prepare(ctx, commitSQL, commitSQL)
		if err != nil {
			return out, fmt.Errorf("prepare commit: %w", unavailable(err))
		}
		sds[len(stmts)] = sd
	}

	enc := s.encoders.Get().(*encoders)
	defer s.encoders.Put(enc)
	pl := conn.PgConn().StartPipeline(ctx)
	for i, st := range stmts {
		values, formats, err := enc.params(conn.TypeMap(), sds[i], st.args)
		if err != nil {
			_ = pl.Close() // nothing was sent; with requests queued, Close closes the connection: nothing commits
			return out, fmt.Errorf("encode delivery statement %d: %w", i, err)
		}
		pl.SendQueryPrepared(sds[i].Name, values, formats, binaryResults)
	}
	pl.SendPipelineSync()
	if !p.autocommit {
		pl.SendQueryPrepared(sds[len(stmts)].Name, nil, nil, nil)
		pl.SendPipelineSync()
	}
	if err := pl.Flush(); err != nil {
		_ = pl.Close()
		// Some of it, the COMMIT included, may have reached the server.
		return out, fmt.Errorf("send delivery: %w: %w: %w", ErrUnavailable, ErrOutcomeUnknown, err)
	}

	i := 0 // the statement whose result comes next
	fail := func(err error) error {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			// The connection is gone: the outcome of COMMIT is unknown.
			_ = pl.Close()
			return fmt.Errorf("delivery pipeline: %w: %w: %w", ErrUnavailable, ErrOutcomeUnknown, err)
		}
		if out.failed == nil {
			out.failed, out.failedAt = err, i
		}
		i = len(stmts) // the rest of this segment is skipped
		return nil
	}
	for syncs > 0 {
		res, err := pl.GetResults()
		if err != nil {
			if err := fail(err); err != nil {
				return out, err
			}
			continue
		}
		switch r := res.(type) {
		case *pgconn.PipelineSync:
			syncs--
		case *pgconn.ResultReader:
			var tag pgconn.CommandTag
			switch {
			case i == p.read:
				tag, err = decodeStored(r, out.rows)
			case i == p.claim && p.returning:
				tag, err = decodeClaimed(r, p.ds, out.claimed)
			default:
				tag, err = r.Close()
			}
			if err != nil {
				if err := fail(err); err != nil {
					return out, err
				}
				continue
			}
			out.tags[min(i, len(stmts))] = tag
			i++
		case nil:
			_ = pl.Close()
			return out, fmt.Errorf("delivery pipeline: results ended early: %w: %w", ErrUnavailable, ErrOutcomeUnknown)
		}
	}
	if err := pl.Close(); err != nil {
		return out, fmt.Errorf("delivery pipeline: %w", err)
	}
	if commit := out.tags[len(stmts)].String(); !p.autocommit && out.failed == nil && commit != "COMMIT" {
		return out, fmt.Errorf("commit delivery: PostgreSQL answered %q", commit)
	}
	return out, nil
}

// encoders encode a pipeline's parameters: its own for the common types,
// pgx's for the rest.
type encoders struct {
	own encoder
	pgx pgx.ExtendedQueryBuilder
}

// params encodes args for sd, with enc's own encoder when it can, with
// pgx's otherwise. The values and formats are valid until enc encodes again.
func (enc *encoders) params(m *pgtype.Map, sd *pgconn.StatementDescription, args []any) ([][]byte, []int16, error) {
	ok, err := enc.own.encode(sd, args)
	if err != nil {
		return nil, nil, err
	}
	if ok {
		return enc.own.values, enc.own.formats[:len(args)], nil
	}
	if err := enc.pgx.Build(m, sd, args); err != nil {
		return nil, nil, err
	}
	return enc.pgx.ParamValues, enc.pgx.ParamFormats, nil
}

// binaryResults asks for every result column in binary format.
var binaryResults = []int16{1}

// pgEpoch is PostgreSQL's timestamp epoch.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// decodeStored decodes storedSQL's rows into rows, by delivery number, from
// binary columns: int8, bytea, uuid, int2, text, bytea, timestamptz.
func decodeStored(r *pgconn.ResultReader, rows []stored) (pgconn.CommandTag, error) {
	for r.NextRow() {
		v := r.Values()
		if len(v) != 7 || len(v[0]) != 8 || len(v[2]) != 16 || len(v[3]) != 2 || len(v[6]) != 8 {
			_, _ = r.Close()
			return pgconn.CommandTag{}, errors.New("read stored delivery: unexpected row shape")
		}
		n := int64(binary.BigEndian.Uint64(v[0]))
		if n < 1 || n > int64(len(rows)) {
			_, _ = r.Close()
			return pgconn.CommandTag{}, fmt.Errorf("read stored delivery: row for delivery %d of %d", n, len(rows))
		}
		st := &rows[n-1]
		st.found = true
		st.sum = bytes.Clone(v[1])
		copy(st.eventID[:], v[2])
		st.resp.Status = int(int16(binary.BigEndian.Uint16(v[3])))
		st.resp.ContentType = string(v[4])
		st.resp.Body = append([]byte{}, v[5]...)
		st.expires = pgEpoch.Add(time.Duration(int64(binary.BigEndian.Uint64(v[6]))) * time.Microsecond)
	}
	return r.Close()
}

// readStored runs the prepared storedSQL named name with values after
// probeSettingsSQL, in one round trip and one implicit transaction, and
// decodes its rows into rows.
func readStored(ctx context.Context, pc *pgconn.PgConn, name string, values [][]byte, formats []int16, rows []stored) error {
	pl := pc.StartPipeline(ctx)
	pl.SendQueryParams(probeSettingsSQL, nil, nil, nil, nil)
	pl.SendQueryPrepared(name, values, formats, binaryResults)
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		_ = pl.Close()
		return err
	}
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for readers := 0; ; {
		res, err := pl.GetResults()
		if err != nil {
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				_ = pl.Close()
				return err
			}
			keep(err) // the statements after it are skipped up to the sync
			continue
		}
		r, ok := res.(*pgconn.ResultReader)
		if !ok {
			if res == nil {
				keep(errors.New("results ended early"))
			}
			break // the sync
		}
		if readers++; readers == 2 {
			_, err = decodeStored(r, rows)
		} else {
			_, err = r.Close()
		}
		if err != nil {
			keep(err)
		}
	}
	if err := pl.Close(); err != nil {
		keep(err)
	}
	return first
}

// readHeld reads what holds the keys of the deliveries of ds that claimed
// says a claim found held, in one statement on conn once the claim's
// transaction has ended: by delivery, in ds's order, unfound for the
// others. Its snapshot sees what every transaction that held one of those
// keys committed: the claim waited for each to end. A duplicate in a batch
// that missed the replay cache costs the batch this one round trip, not a
// transaction of its own.
func (s *Store) readHeld(ctx context.Context, conn *pgx.Conn, ds []idempotency.Delivery, claimed []bool) ([]stored, error) {
	var ids, eventIDs column
	var at []int // the delivery of each row read
	for i, d := range ds {
		if !claimed[i] {
			ids, eventIDs = append(ids, d.DeliveryID), append(eventIDs, [16]byte(d.EventID))
			at = append(at, i)
		}
	}
	sd, err := conn.Prepare(ctx, storedSQL, storedSQL)
	if err != nil {
		return nil, fmt.Errorf("read held keys: %w", err)
	}
	args := []any{ds[0].Sender, ids, eventIDs}
	enc := s.encoders.Get().(*encoders)
	defer s.encoders.Put(enc)
	values, formats, err := enc.params(conn.TypeMap(), sd, args)
	if err != nil {
		return nil, fmt.Errorf("read held keys: %w", err)
	}
	rows := make([]stored, len(at))
	if err := readStored(ctx, conn.PgConn(), sd.Name, values, formats, rows); err != nil {
		return nil, fmt.Errorf("read held keys: %w", err)
	}
	out := make([]stored, len(ds))
	for j, i := range at {
		out[i] = rows[j]
	}
	return out, nil
}

// decodeClaimed marks in claimed the deliveries of ds whose keys a
// returning claim inserted, by the rows it returned.
func decodeClaimed(r *pgconn.ResultReader, ds []idempotency.Delivery, claimed []bool) (pgconn.CommandTag, error) {
	// A batch may carry two deliveries of one key, each with its own event
	// ID; the claim inserts one.
	type claim struct {
		deliveryID string
		eventID    uuid.UUID
	}
	at := make(map[claim]int, len(ds))
	for i, d := range ds {
		at[claim{d.DeliveryID, d.EventID}] = i
	}
	for r.NextRow() {
		v := r.Values()
		if len(v) != 2 || len(v[1]) != 16 {
			_, _ = r.Close()
			return pgconn.CommandTag{}, errors.New("claim delivery: unexpected row shape")
		}
		i, ok := at[claim{string(v[0]), uuid.UUID(v[1])}]
		if !ok {
			_, _ = r.Close()
			return pgconn.CommandTag{}, errors.New("claim delivery: the claim returned a key of no delivery of the batch")
		}
		claimed[i] = true
	}
	return r.Close()
}
