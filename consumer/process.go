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

// Schema is the DDL of the package's table, consumer_processed_messages,
// from the file schema.sql. It is idempotent. Run it with your own migration
// tool, or with [Migrate].
//
//go:embed schema.sql
var Schema string

// Constraint is the name of the unique constraint on consumer_name and
// message_id. Only a conflict on it means "already processed".
const Constraint = "consumer_processed_messages_key"

// MaxResponseBytes bounds the body of a stored response. Past it, [Process]
// fails with [ErrResponseTooLarge] and stores nothing.
const MaxResponseBytes = 1 << 20

// MaxMessageIDBytes bounds a message ID. Past it, [Process] fails with
// [ErrInvalidMessageID].
const MaxMessageIDBytes = 255

// DefaultInFlightWait is the default of [Config.InFlightWait].
const DefaultInFlightWait = 5 * time.Second

var (
	// ErrInFlight is returned when another transaction holds the message's
	// key for longer than the in-flight wait. The message is being
	// processed elsewhere, and nothing was recorded here. Retry later.
	ErrInFlight = errors.New("consumer: the message is being processed by another transaction")
	// ErrInvalidMessageID is returned for an empty consumer name or message
	// ID, or one longer than [MaxMessageIDBytes]. It is also returned for a
	// NUL byte or invalid UTF-8, which PostgreSQL's text cannot store.
	ErrInvalidMessageID = errors.New("consumer: invalid consumer name or message ID")
	// ErrResponseTooLarge is returned when a change's response body is over
	// [MaxResponseBytes]. The transaction is rolled back.
	ErrResponseTooLarge = errors.New("consumer: response body over MaxResponseBytes")
)

// DB is what [Process] needs of the caller's database. *pgxpool.Pool and
// *pgx.Conn satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Response is what a state change answers. It is stored with the message's
// key in the change's transaction. It is returned again, unchanged, for
// every later delivery of the message. The zero Response, with status 0 and
// no body, is valid for callers that need none.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
}

// Result is the outcome of [Process].
type Result struct {
	// Duplicate is true when an earlier call, or a concurrent one that
	// committed first, had already processed the message. The change did
	// not run in this call.
	Duplicate bool
	// Response is the change's response. For a duplicate, it is the stored
	// response of the call that processed the message.
	Response Response
}

// Change is a caller's state change. It runs on tx, the transaction that
// claimed the message, and returns the response to store. An error rolls
// back the claim and the change, and [Process] returns it. A change must
// not commit or roll back tx. It must not have effects outside the
// database, because they would happen again after a rollback and a retry.
type Change func(ctx context.Context, tx pgx.Tx) (Response, error)

// Config configures a [Processor]. The zero Config is valid. A field left
// at zero takes its documented default, which [DefaultConfig] spells out.
// So code written against the zero value keeps working.
type Config struct {
	// InFlightWait bounds how long a delivery waits for another
	// transaction that holds the same message's key. It is set as the
	// transaction's lock_timeout, rounded up to whole milliseconds. Zero
	// means [DefaultInFlightWait], since a lock_timeout of 0 waits for ever.
	// A negative value is refused. It also bounds the change's own lock
	// waits. A statement that waits longer fails with SQLSTATE 55P03, and
	// Process returns that as the change's error, not [ErrInFlight].
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

// New returns a Processor on db. It fails when cfg is invalid. db must hold
// the package's table; see [Migrate].
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

// Process calls [Processor.Process] on New(db, DefaultConfig()).
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

// Process applies change at most once for consumerName and messageID, in
// one transaction with the claim of that key.
//
// When this call claimed the key and committed, it returns the change's
// response with Duplicate false. When the message had been processed, it
// returns the stored response with Duplicate true. It returns [ErrInFlight]
// when another transaction held the key past the in-flight wait. It returns
// [ErrInvalidMessageID] for a key that PostgreSQL cannot store, and
// [ErrResponseTooLarge] for a response over [MaxResponseBytes]. Otherwise it
// rolls everything back and returns the wrapped error that failed the
// transaction. Only a conflict on [Constraint] means "duplicate". A panic in
// change rolls back and is re-raised.
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
		// A lost connection here leaves the outcome unknown. The caller
		// answers with an error, and the sender's retry finds out.
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

// IsDuplicate reports whether err is a unique violation of [Constraint],
// the only error that means "already processed". [Process] never returns
// one, since ON CONFLICT absorbs it. It serves callers that claim keys with
// their own INSERT. A unique violation of any other constraint, any other
// error and nil are not duplicates.
func IsDuplicate(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation && pgErr.ConstraintName == Constraint
}

// validKey reports whether s can be a consumer name or message ID: 1 to
// MaxMessageIDBytes bytes of valid UTF-8 without NUL.
func validKey(s string) bool {
	return s != "" && len(s) <= MaxMessageIDBytes && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}
