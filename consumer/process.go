package consumer

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schema is the DDL of the package's table, consumer_processed_messages
// (the file schema.sql). It is idempotent: run it with your own migration
// tool, or with Migrate.
//
//go:embed schema.sql
var Schema string

// Constraint is the name of the unique constraint on (consumer_name,
// message_id): only a conflict on it means "already processed".
const Constraint = "consumer_processed_messages_key"

// MaxResponseBytes bounds the body of a stored response: Process fails with
// ErrResponseTooLarge, and stores nothing, past it.
const MaxResponseBytes = 1 << 20

// MaxMessageIDBytes bounds a message ID: Process fails with
// ErrInvalidMessageID past it.
const MaxMessageIDBytes = 255

// DefaultInFlightWait is Config.InFlightWait's default.
const DefaultInFlightWait = 5 * time.Second

var (
	// ErrInFlight is returned when another transaction holds the message's
	// key for longer than the in-flight wait: the message is being processed
	// elsewhere, and nothing was recorded here. Retry later.
	ErrInFlight = errors.New("consumer: the message is being processed by another transaction")
	// ErrInvalidMessageID is returned for an empty consumer name or message
	// ID, or one longer than MaxMessageIDBytes, or one holding a NUL byte or
	// invalid UTF-8 (which PostgreSQL's text cannot store).
	ErrInvalidMessageID = errors.New("consumer: invalid consumer name or message ID")
	// ErrResponseTooLarge is returned when a change's response body is over
	// MaxResponseBytes; the transaction is rolled back.
	ErrResponseTooLarge = errors.New("consumer: response body over MaxResponseBytes")
)

// DB is what Process needs of the caller's database: *pgxpool.Pool and
// *pgx.Conn satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Response is what a state change answers. It is stored with the message's
// key in the change's transaction and returned again, unchanged, for every
// later delivery of the message. The zero Response is a valid one (status 0,
// no body) for callers that need none.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
}

// Result is the outcome of Process.
type Result struct {
	// Duplicate is true when the message had already been processed, by an
	// earlier call or by a concurrent one that committed first: the change
	// did not run in this call.
	Duplicate bool
	// Response is the change's response (Duplicate false), or the stored
	// response of the call that processed the message (Duplicate true).
	Response Response
}

// Change is a caller's state change: it runs on tx, the transaction that
// claimed the message, and returns the response to store. Returning an
// error rolls back the claim and the change; Process returns that error.
// A change must not commit or roll back tx, and must not have effects
// outside the database (they would happen again when the transaction rolls
// back and the message is retried).
type Change func(ctx context.Context, tx pgx.Tx) (Response, error)

// Config configures a Processor. The zero Config is valid: a field left at
// zero takes its documented default (DefaultConfig returns them spelled
// out), so that code written against the zero value keeps working.
type Config struct {
	// InFlightWait bounds how long a delivery waits for another transaction
	// holding the same message's key (PostgreSQL's lock_timeout, set for the
	// transaction only). Zero means DefaultInFlightWait (a lock_timeout of
	// 0 would wait for ever); a negative one is refused; it is rounded up to
	// whole milliseconds. Being the transaction's lock_timeout, it bounds
	// every lock wait of the change's own statements too: one that waits
	// longer fails with SQLSTATE 55P03 (lock_not_available), which Process
	// returns as the change's error (not ErrInFlight), rolled back.
	InFlightWait time.Duration
}

// DefaultConfig returns a Processor's defaults.
func DefaultConfig() Config {
	return Config{InFlightWait: DefaultInFlightWait}
}

func (c Config) validate() error {
	if c.InFlightWait < 0 {
		return fmt.Errorf("consumer: Config.InFlightWait %v is negative", c.InFlightWait)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.InFlightWait == 0 {
		c.InFlightWait = DefaultInFlightWait
	}
	return c
}

// Processor applies state changes at most once per message, on one
// database. It is safe for concurrent use.
type Processor struct {
	db          DB
	lockTimeout string // SET LOCAL lock_timeout's value, in milliseconds
}

// New returns a Processor on db. It fails when cfg is invalid. db's schema
// must hold the package's table (Schema, Migrate).
func New(db DB, cfg Config) (*Processor, error) {
	if db == nil {
		return nil, errors.New("consumer: nil DB")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ms := (cfg.InFlightWait + time.Millisecond - 1) / time.Millisecond
	return &Processor{db: db, lockTimeout: strconv.FormatInt(int64(ms), 10)}, nil
}

// Process is New(db, DefaultConfig()) followed by its Process.
func Process(ctx context.Context, db DB, consumerName, messageID string, change Change) (Result, error) {
	p, err := New(db, DefaultConfig())
	if err != nil {
		return Result{}, err
	}
	return p.Process(ctx, consumerName, messageID, change)
}

const (
	claimSQL = `INSERT INTO consumer_processed_messages (consumer_name, message_id) VALUES ($1, $2)
ON CONFLICT ON CONSTRAINT consumer_processed_messages_key DO NOTHING RETURNING true`
	storeSQL = `UPDATE consumer_processed_messages
SET response_status = $3, response_content_type = $4, response_body = $5
WHERE consumer_name = $1 AND message_id = $2`
	readSQL = `SELECT response_status, response_content_type, response_body
FROM consumer_processed_messages WHERE consumer_name = $1 AND message_id = $2`
)

// Process applies change at most once for (consumerName, messageID), in
// one transaction with the claim of that key (see the package
// documentation).
//
// It returns the change's response with Duplicate false when this call
// claimed the key and committed; the stored response with Duplicate true
// when the message had been processed; ErrInFlight when another
// transaction held the key past the in-flight wait; ErrInvalidMessageID for
// a key PostgreSQL cannot store; ErrResponseTooLarge for a response over
// MaxResponseBytes; and otherwise the error that failed the transaction
// (wrapped), after rolling everything back. No error means "duplicate" but a
// conflict on Constraint. A panic in change rolls back and is re-raised.
func (p *Processor) Process(ctx context.Context, consumerName, messageID string, change Change) (res Result, err error) {
	if !validKey(consumerName) || !validKey(messageID) {
		return Result{}, ErrInvalidMessageID
	}
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("consumer: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			// On an error, a duplicate or a panic: the claim (if any) and
			// the change go. Rollback's own error only says the
			// connection is gone, which rolls back too.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()

	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", p.lockTimeout); err != nil {
		return Result{}, fmt.Errorf("consumer: set lock_timeout: %w", err)
	}
	var claimed bool
	err = tx.QueryRow(ctx, claimSQL, consumerName, messageID).Scan(&claimed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// The key is held by a committed transaction: a duplicate.
		resp, err := readStored(ctx, tx, consumerName, messageID)
		if err != nil {
			return Result{}, err
		}
		return Result{Duplicate: true, Response: resp}, nil
	case isLockTimeout(err):
		return Result{}, ErrInFlight
	case err != nil:
		return Result{}, fmt.Errorf("consumer: claim message: %w", err)
	}

	resp, err := change(ctx, tx)
	if err != nil {
		return Result{}, err
	}
	if len(resp.Body) > MaxResponseBytes {
		return Result{}, ErrResponseTooLarge
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	if _, err := tx.Exec(ctx, storeSQL, consumerName, messageID, int16(resp.Status), resp.ContentType, body); err != nil {
		return Result{}, fmt.Errorf("consumer: store response: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		// A lost connection here leaves the outcome unknown: the caller
		// answers with an error, and the sender's retry finds out (a
		// duplicate if the COMMIT went through).
		return Result{}, fmt.Errorf("consumer: commit: %w", err)
	}
	committed = true
	return Result{Response: resp}, nil
}

func readStored(ctx context.Context, tx pgx.Tx, consumerName, messageID string) (Response, error) {
	var r Response
	var status int16
	if err := tx.QueryRow(ctx, readSQL, consumerName, messageID).Scan(&status, &r.ContentType, &r.Body); err != nil {
		return Response{}, fmt.Errorf("consumer: read stored response: %w", err)
	}
	r.Status = int(status)
	return r, nil
}

// isLockTimeout reports whether err is PostgreSQL's lock_timeout firing.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable
}

// IsDuplicate reports whether err is a unique violation of Constraint: the
// only error that means "already processed". Process never returns one (it
// absorbs that conflict with ON CONFLICT); it is exported for callers that
// claim keys with their own INSERT. A unique violation of any other
// constraint, any other error, and nil are not duplicates.
func IsDuplicate(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation && pgErr.ConstraintName == Constraint
}

// validKey reports whether s can be a consumer name or message ID: 1 to
// MaxMessageIDBytes bytes of valid UTF-8 without NUL.
func validKey(s string) bool {
	return s != "" && len(s) <= MaxMessageIDBytes && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}
