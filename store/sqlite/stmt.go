package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// stmts caches prepared statements. Parsing is a large share of a small
// statement's cost in SQLite; database/sql keeps one prepared copy per
// connection of a *sql.Stmt and reuses it inside transactions (Tx.StmtContext).
// Statements are prepared on first use rather than in New, because the table
// may not exist before Migrate.
type stmts struct {
	mu     sync.Mutex
	m      map[string]*sql.Stmt
	closed bool
}

// get returns the prepared statement for query, preparing it once.
func (c *stmts) get(ctx context.Context, db *sql.DB, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.m[query]; st != nil {
		return st, nil
	}
	if c.closed {
		return nil, sql.ErrConnDone
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err // not cached: a later call retries (after Migrate, say)
	}
	if c.m == nil {
		c.m = make(map[string]*sql.Stmt)
	}
	c.m[query] = st
	return st, nil
}

// warm prepares the queries not cached yet, ignoring failures (a table
// that does not exist before Migrate): the transaction then prepares them
// itself.
func (c *stmts) warm(ctx context.Context, db *sql.DB, queries ...string) {
	for _, q := range queries {
		if q != "" && c.cached(q) == nil {
			_, _ = c.get(ctx, db, q)
		}
	}
}

// cached returns query's prepared statement if there is one.
func (c *stmts) cached(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

func (c *stmts) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m, c.closed = nil, true
}

// prepared returns query's statement for use on the database (tx nil) or
// inside tx.
//
// Inside tx, a statement not cached yet is prepared on tx itself: preparing
// it on the database would wait for a second connection, which never comes
// when the pool has one (SetMaxOpenConns(1), common with SQLite) and tx holds
// it. The next use outside a transaction caches it.
func (s *Store) prepared(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	if tx != nil {
		if st := s.stmts.cached(query); st != nil {
			return tx.StmtContext(ctx, st), nil
		}
		return tx.PrepareContext(ctx, query)
	}
	st, err := s.stmts.get(ctx, s.db, query)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// queryRow runs a one-row query through the statement cache.
func (s *Store) queryRow(ctx context.Context, tx *sql.Tx, query string, args ...any) (*sql.Row, error) {
	st, err := s.prepared(ctx, tx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryRowContext(ctx, args...), nil
}

// execStmt runs a statement through the statement cache.
func (s *Store) execStmt(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	st, err := s.prepared(ctx, tx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}
