package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"

	// The pure-Go SQLite driver, registered as "sqlite".
	_ "modernc.org/sqlite"
)

// DriverName is the database/sql driver name of modernc.org/sqlite.
const DriverName = "sqlite"

// DefaultTable is the records table used when Options.Table is empty.
const DefaultTable = "idem_records"

// DefaultBusyTimeout is how long a write waits for the database's single
// writer lock before it fails.
const DefaultBusyTimeout = 5 * time.Second

// Errors, checked with errors.Is.
var (
	// ErrInvalidTable means Options.Table is not a plain SQL identifier. The
	// error also wraps idem.ErrInvalidOptions.
	ErrInvalidTable = errors.New("sqlite: invalid table name")
	// ErrInvalidPath means the path given to Open cannot name a database file.
	ErrInvalidPath = errors.New("sqlite: invalid database path")
	// ErrBusy means a write waited longer than Options.BusyTimeout for the
	// store's writer lock (another write transaction of this Store held it).
	// It is a store failure: the message is retried.
	ErrBusy = errors.New("sqlite: database busy (write lock wait timed out)")
)

// Synchronous is SQLite's synchronous setting for databases opened by Open.
type Synchronous int

// Synchronous settings.
const (
	// SyncFull (the default) syncs the write-ahead log on every commit: a
	// committed marker survives a power loss. This is what "ack only after
	// the record is durable" needs, since the broker forgets an acked
	// message.
	SyncFull Synchronous = iota
	// SyncNormal syncs only at checkpoints: commits are faster, the database
	// never corrupts, but the last commits before a power loss (not a process
	// crash) can be lost, and with them the markers of messages already acked.
	SyncNormal
)

func (s Synchronous) pragma() (string, error) {
	switch s {
	case SyncFull:
		return "FULL", nil
	case SyncNormal:
		return "NORMAL", nil
	}
	return "", fmt.Errorf("%w: unknown Synchronous %d", idem.ErrInvalidOptions, s)
}

// Options configure a Store. The zero value works.
type Options struct {
	// Table is the records table. Default "idem_records". It must be a plain
	// identifier (letters, digits, underscores, not starting with a digit or
	// "sqlite_"), at most 64 bytes.
	Table string
	// BusyTimeout bounds how long a write waits for the writer lock. Default
	// 5s. With New it bounds only waits inside this Store; set the driver's
	// own busy timeout in the DSN (see DSN).
	BusyTimeout time.Duration
	// Synchronous is the durability of commits for databases opened by Open
	// (New leaves the caller's connection settings alone). Default SyncFull.
	Synchronous Synchronous
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidateTable reports whether name can be used as Options.Table. The error
// wraps ErrInvalidTable and idem.ErrInvalidOptions.
func ValidateTable(name string) error {
	switch {
	case !identRE.MatchString(name):
		return fmt.Errorf("%w: %w %q: use letters, digits and underscores, not starting with a digit",
			idem.ErrInvalidOptions, ErrInvalidTable, name)
	case len(name) > 64:
		return fmt.Errorf("%w: %w %.20q…: longer than 64 bytes", idem.ErrInvalidOptions, ErrInvalidTable, name)
	case strings.HasPrefix(strings.ToLower(name), "sqlite_"):
		return fmt.Errorf("%w: %w %q: names starting with sqlite_ are reserved by SQLite",
			idem.ErrInvalidOptions, ErrInvalidTable, name)
	}
	return nil
}

func (o *Options) validate() error {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := ValidateTable(o.Table); err != nil {
		return err
	}
	if o.BusyTimeout < 0 {
		return fmt.Errorf("%w: negative BusyTimeout", idem.ErrInvalidOptions)
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	_, err := o.Synchronous.pragma()
	return err
}

// Store is an idem.Store on SQLite. It also implements storekit.BatchStore,
// idem.Inspector and idem.TxStore[*sql.Tx]. It is safe for concurrent use.
type Store struct {
	db   *sql.DB
	opts Options
	q    queries
	// ownsDB: Close closes db (Open made it).
	ownsDB bool
	// immediate: db's transactions begin IMMEDIATE (the DSN says so), so a
	// transaction holds the writer lock from its first statement. Otherwise
	// write transactions take it with a no-op write first.
	immediate bool
	// wlock serialises this Store's write transactions in-process. SQLite
	// has one writer anyway; waiting here is a queue that hands the lock over
	// at once, while SQLite's busy handler polls with millisecond sleeps in no
	// order, so that under many concurrent writers throughput collapses and a
	// starved writer can run past the busy timeout.
	wlock chan struct{}
	stmts stmts
}

var (
	_ idem.Store            = (*Store)(nil)
	_ storekit.BatchStore   = (*Store)(nil)
	_ idem.Inspector        = (*Store)(nil)
	_ idem.TxStore[*sql.Tx] = (*Store)(nil)
)

// DSN returns the data source name Open uses for the file at path: WAL
// journal, the busy timeout, the synchronous setting and transactions that
// begin IMMEDIATE. Callers opening the database themselves for New pass it to
// sql.Open(DriverName, ...).
//
// IMMEDIATE applies to every transaction on the database, so each holds the
// writer lock until it ends: begin transactions that only read with
// &sql.TxOptions{ReadOnly: true}, which begin DEFERRED.
func DSN(path string, opts Options) (string, error) {
	if err := opts.validate(); err != nil {
		return "", err
	}
	switch {
	case strings.TrimSpace(path) == "":
		return "", fmt.Errorf("%w: empty path", ErrInvalidPath)
	case path == ":memory:" || strings.Contains(path, "mode=memory"):
		return "", fmt.Errorf("%w: %q: an in-memory database is private to one connection; use a file (or store/memory)", ErrInvalidPath, path)
	case strings.ContainsAny(path, "?#"):
		return "", fmt.Errorf("%w: %q contains '?' or '#'", ErrInvalidPath, path)
	}
	syncMode, _ := opts.Synchronous.pragma()
	return fmt.Sprintf("%s?_txlock=immediate&_journal_mode=WAL&_synchronous=%s&_busy_timeout=%d",
		path, syncMode, opts.BusyTimeout.Milliseconds()), nil
}

// Open opens (creating if needed) the database file at path with the DSN
// settings described at DSN, and returns a store over it. Call Migrate once
// before use. Close closes the database.
func Open(path string, opts Options) (*Store, error) {
	dsn, err := DSN(path, opts)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(DriverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// Connections are cheap to keep and costly to reopen (each applies the
	// pragmas again); readers run in parallel under WAL.
	db.SetMaxIdleConns(8)
	if err := db.PingContext(context.Background()); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s, err := newStore(db, opts, true)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.ownsDB = true
	return s, nil
}

// New returns a store over the caller's database, which Close leaves open.
// The database should use WAL and a busy timeout (see DSN). When its DSN
// does not ask for IMMEDIATE transactions, the store's write transactions
// (InTx included) take the writer lock with a first no-op write, so that two
// transactions never deadlock upgrading a read lock.
func New(db *sql.DB, opts Options) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", idem.ErrInvalidOptions)
	}
	return newStore(db, opts, false)
}

func newStore(db *sql.DB, opts Options, immediate bool) (*Store, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Store{
		db:        db,
		opts:      opts,
		q:         buildQueries(opts.Table),
		immediate: immediate,
		wlock:     make(chan struct{}, 1),
	}, nil
}

// DB returns the store's database, for the caller's own queries and
// transactions (MarkTx).
func (s *Store) DB() *sql.DB { return s.db }

// Table returns the records table name.
func (s *Store) Table() string { return s.opts.Table }

// Close closes the database if Open opened it; a store made by New leaves
// the caller's database open.
func (s *Store) Close() error {
	s.stmts.close()
	if s.ownsDB {
		return s.db.Close()
	}
	return nil
}
