package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// DefaultTable is the table used when Options.Table is empty.
const DefaultTable = "idem_records"

// MaxTableLen is the longest table name accepted: MySQL identifiers have 64
// characters and Migrate adds the "_migrations" suffix for its version table.
const MaxTableLen = 64 - len(migrationsSuffix)

// MaxFingerprintLen is the longest fingerprint stored as it is, the
// fingerprint column's width.
//
// Deprecated: the store takes any fingerprint: Prepare stores longer ones,
// and ones that are not text, as "sha256:" + their hex digest (see
// storekit.StoredFingerprint). This is idem.MaxFingerprintLen, kept so code that
// names it still builds.
const MaxFingerprintLen = idem.MaxFingerprintLen

// Options configure a Store. The zero value works.
type Options struct {
	// Table is the records table, an unquoted identifier of letters, digits
	// and underscores (at most MaxTableLen). Default DefaultTable.
	Table string
}

// TableError reports an Options.Table that is not a plain identifier.
// errors.Is(err, idem.ErrInvalidOptions) is true.
type TableError struct {
	Table  string
	Reason string
}

// Error names the table and what is wrong with it.
func (e *TableError) Error() string {
	return fmt.Sprintf("mysql: table name %q: %s", e.Table, e.Reason)
}

// Unwrap makes errors.Is(err, idem.ErrInvalidOptions) true.
func (e *TableError) Unwrap() error { return idem.ErrInvalidOptions }

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func validateTable(name string) error {
	switch {
	case name == "":
		return &TableError{name, "empty"}
	case len(name) > MaxTableLen:
		return &TableError{name, fmt.Sprintf("longer than %d characters", MaxTableLen)}
	case !identRE.MatchString(name):
		return &TableError{name, "not an identifier (letters, digits and underscores, not starting with a digit)"}
	}
	return nil
}

// Store is an idem.Store on MariaDB or MySQL (InnoDB). It also implements
// storekit.BatchStore, idem.Inspector and idem.TxStore[*sql.Tx]. It is safe for
// concurrent use by many goroutines and many processes.
type Store struct {
	db    *sql.DB
	owned bool   // opened by Open: Close closes db
	name  string // unquoted table name
	table string // quoted table name
	q     queries
	close sync.Once
}

var (
	_ idem.Store            = (*Store)(nil)
	_ storekit.BatchStore   = (*Store)(nil)
	_ idem.Inspector        = (*Store)(nil)
	_ idem.TxStore[*sql.Tx] = (*Store)(nil)
)

// New returns a store on db, a pool opened with the go-sql-driver/mysql
// driver. The store works whatever the DSN's clientFoundRows and parseTime
// settings (times are stored as BIGINT Unix milliseconds); interpolateParams=true
// saves one round trip per statement and is recommended. Call Migrate once
// before use.
func New(db *sql.DB, opts Options) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysql: nil *sql.DB", idem.ErrInvalidOptions)
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if err := validateTable(opts.Table); err != nil {
		return nil, err
	}
	s := &Store{db: db, name: opts.Table, table: "`" + opts.Table + "`"}
	s.q = buildQueries(s.table)
	return s, nil
}

// Open opens a pool for dsn (a go-sql-driver/mysql DSN such as
// "user:pass@tcp(127.0.0.1:3306)/app") with interpolateParams enabled, and
// returns a store that owns it: Close closes the pool.
func Open(dsn string, opts Options) (*Store, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: parse DSN: %w", err)
	}
	cfg.InterpolateParams = true
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	s, err := New(db, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// DB returns the pool the store uses.
func (s *Store) DB() *sql.DB { return s.db }

// Table returns the (unquoted) records table name.
func (s *Store) Table() string { return s.name }

// Close closes the pool if the store opened it (Open); a pool passed to New
// belongs to the caller and stays open.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	var err error
	s.close.Do(func() { err = s.db.Close() })
	return err
}

// Data errors: the server's refusals of a value (strict sql_mode), whatever
// the statement: SQLSTATE class 22 (data exception) and the data errors MySQL
// files under other classes. Retrying the same message would fail the same
// way, so they are reported as *idem.InvalidDataError (permanent,
// dead-lettered). After Prepare the store's own values fit its columns, so
// these come from a schema changed by hand, a server or proxy that converts
// differently, or a value the request carries unchecked (a result).
var dataErrors = map[uint16]bool{
	1048: true, // ER_BAD_NULL_ERROR: column cannot be null (SQLSTATE 23000)
	1264: true, // ER_WARN_DATA_OUT_OF_RANGE: out of range value for column
	1265: true, // WARN_DATA_TRUNCATED: data truncated for column (01000)
	1292: true, // ER_TRUNCATED_WRONG_VALUE: incorrect value
	1300: true, // ER_INVALID_CHARACTER_STRING (HY000)
	1366: true, // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: incorrect string value
	1367: true, // ER_ILLEGAL_VALUE_FOR_TYPE
	1406: true, // ER_DATA_TOO_LONG
	1411: true, // ER_WRONG_VALUE_FOR_TYPE
	1690: true, // ER_DATA_OUT_OF_RANGE: value is out of range
}

// errPacketTooLarge is ER_NET_PACKET_TOO_LARGE: a statement over the server's
// max_allowed_packet.
const errPacketTooLarge = 1153

// dataErr returns err as an *idem.InvalidDataError for op when it is one of
// the server's data errors, and err unchanged otherwise: connection loss,
// timeouts, lock waits and deadlocks stay retryable.
func dataErr(op string, err error) error {
	if se := missingTable(err); se != nil {
		return fmt.Errorf("mysql: %s: %w", op, se)
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) && (dataErrors[me.Number] || me.SQLState[0] == '2' && me.SQLState[1] == '2') {
		return &idem.InvalidDataError{Op: op, Err: err}
	}
	return err
}

// resultErr is dataErr for statements that carry a handler's result: a
// result too large for a packet (the driver's maxAllowedPacket or the
// server's max_allowed_packet) would be refused on every retry too, so it is
// invalid data as well. Claims are not classified so: their values are
// bounded, and a statement of theirs over the limit is the store's
// configuration, not the message's data.
func resultErr(op string, err error) error {
	var me *gomysql.MySQLError
	if errors.Is(err, gomysql.ErrPktTooLarge) || errors.As(err, &me) && me.Number == errPacketTooLarge {
		return &idem.InvalidDataError{Op: op, Err: err}
	}
	return dataErr(op, err)
}

// bigResult is the result size from which Complete and SaveResult check it
// against the server's max_allowed_packet before sending it; packetSlack
// bounds what the statement adds to the result's bytes (its SQL text, the
// key, the packet header).
const (
	bigResult   = 1 << 20
	packetSlack = 4 << 10
)

// checkResult refuses, as invalid data, a result that the server would refuse
// on every try. Over max_allowed_packet the server closes the connection,
// which with interpolateParams the driver reports as a plain connection
// reset, indistinguishable from a network failure and so retried forever.
// Results under bigResult are not checked (no round trip); bigger ones cost
// one query of the server's variable, small beside sending them.
func checkResult(ctx context.Context, q queryRower, op string, result []byte) error {
	if len(result) < bigResult {
		return nil
	}
	limit, err := maxPacket(ctx, q)
	if err != nil {
		return err
	}
	// Interpolation escapes these bytes with a backslash: count them, so the
	// bound holds in both driver modes.
	size := int64(len(result) + packetSlack)
	for _, c := range []byte{0, '\n', '\r', 0x1a, '\'', '"', '\\'} {
		size += int64(bytes.Count(result, []byte{c}))
	}
	if size > limit {
		return &idem.InvalidDataError{Op: op, Err: fmt.Errorf("mysql: a result of %d bytes does not fit the server's max_allowed_packet (%d bytes)", len(result), limit)}
	}
	return nil
}

// maxPacket is the server's max_allowed_packet.
func maxPacket(ctx context.Context, q queryRower) (int64, error) {
	var limit int64
	err := q.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&limit)
	return limit, err
}

// ResultLimit is the size in bytes of the largest result the store records:
// the server's max_allowed_packet less the room the statement takes beside
// the result (bytes that need escaping count twice). Complete and
// SaveResult refuse a larger one with an *idem.InvalidDataError, nothing
// written, and so does every try after it; keep the guard's MaxResultSize
// under it.
func (s *Store) ResultLimit(ctx context.Context) (int, error) {
	limit, err := maxPacket(ctx, s.db)
	if err != nil {
		return 0, fmt.Errorf("mysql: result limit: %w", err)
	}
	return int(limit - packetSlack), nil
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// errDeadlock is InnoDB's "deadlock found; the transaction was rolled back".
// The store retries its own short transactions on it, a few times; callers'
// transactions (Mark) are never retried behind their back. A lock wait
// timeout (1205) is not retried: it means another transaction held the record
// for all of innodb_lock_wait_timeout, and waiting again at once would not
// help. It surfaces as a store error, so the message is redelivered later.
const (
	errDeadlock = 1213
	maxAttempts = 5
)

func retryable(err error) bool {
	if errors.Is(err, errVanished) {
		return true
	}
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == errDeadlock
}

// retryBackoff spaces the attempts of retry: 1, 2, 4, 8 ms, each with
// jitter (idem.ExponentialBackoff), so that the transactions that deadlocked
// together do not start again together and meet again.
var retryBackoff = idem.ExponentialBackoff(time.Millisecond, 8*time.Millisecond)

// retry runs fn until it succeeds, fails with a non-retryable error, or has
// been tried maxAttempts times, waiting retryBackoff between attempts; a
// context done while it waits ends it with the last error.
func retry(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		if attempt == maxAttempts {
			return fmt.Errorf("mysql: gave up after %d attempts: %w", maxAttempts, err)
		}
		t := time.NewTimer(retryBackoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// inTxRC runs fn in a READ COMMITTED transaction of the store's own. READ
// COMMITTED because its locking reads then lock only the records they find:
// under REPEATABLE READ a locking read of an absent key (or a range delete)
// locks the gap around it, blocking inserts of unrelated keys.
func (s *Store) inTxRC(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit a no-op; on a panic in fn it ends the transaction
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func quoteList(n int, item string) string {
	return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
}

// Ping reports whether the server answers (storekit.Pinger): DoTx asks
// after a handler failed, to tell a server restarted mid-transaction from
// the handler's own failure.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }
