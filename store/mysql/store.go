package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemgo/idem"
)

// DefaultTable is the table used when Options.Table is empty.
const DefaultTable = "idem_records"

// MaxTableLen is the longest table name accepted: MySQL identifiers have 64
// characters and Migrate adds the "_migrations" suffix for its version table.
const MaxTableLen = 64 - len(migrationsSuffix)

// MaxFingerprintLen is the longest fingerprint the store keeps (a hex
// SHA-256 is 64 bytes). Keys need no such limit here: idem.Key.Validate
// bounds scopes and idem.Key.StoredID hashes long ids, so (scope, id) fits the
// primary key in 400 bytes.
const MaxFingerprintLen = 1024

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
// idem.BatchStore, idem.Inspector and idem.TxStore[*sql.Tx]. It is safe for
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
	_ idem.BatchStore       = (*Store)(nil)
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

// validateReq checks what the columns can hold. The server would reject an
// oversized value in strict mode but truncate it silently otherwise, which
// could merge two keys: so the check happens here, whatever the sql_mode.
func validateReq(req idem.ClaimRequest) error {
	if err := req.Key.Validate(); err != nil {
		return err
	}
	if len(req.Fingerprint) > MaxFingerprintLen {
		return fmt.Errorf("%w: fingerprint of %d bytes (the mysql store keeps at most %d)",
			idem.ErrInvalidKey, len(req.Fingerprint), MaxFingerprintLen)
	}
	return nil
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

// retry runs fn until it succeeds, fails with a non-retryable error, or has
// been tried maxAttempts times.
func retry(ctx context.Context, fn func() error) error {
	var err error
	for range maxAttempts {
		if err = fn(); err == nil || !retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
	}
	return fmt.Errorf("mysql: gave up after %d attempts: %w", maxAttempts, err)
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
