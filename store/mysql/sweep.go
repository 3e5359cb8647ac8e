package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
)

// lockName derives a server-wide named-lock name (GET_LOCK names span all
// databases and MySQL caps them at 64 characters) from the database and
// table, so stores on different tables never exclude each other.
const lockName = "CONCAT('idem:', ?, ':', SHA1(CONCAT(DATABASE(), '.', ?)))"

// withNamedLock runs fn on one connection while holding the named lock
// (purpose, table). wait is how long the server waits for the lock; a zero
// wait tries once. It reports false without running fn when the lock is held
// elsewhere.
func (s *Store) withNamedLock(ctx context.Context, purpose string, wait time.Duration, fn func(conn *sql.Conn) error) (bool, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+lockName+", ?)", purpose, s.name, wait.Seconds()).Scan(&got); err != nil {
		return false, err
	}
	if !got.Valid || got.Int64 != 1 {
		return false, nil
	}
	ferr := fn(conn)
	// Release even when ctx has ended; if that fails, close the session,
	// which releases the lock, rather than pool a connection holding it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(rctx, "DO RELEASE_LOCK("+lockName+")", purpose, s.name); err != nil {
		conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	return true, ferr
}

// Sweep implements idem.Store: it deletes up to req.Limit records whose
// retention ended by the caller's clock (req.Now), oldest first, through the
// expires_at index; an in-progress record whose lease is live is never
// deleted, whatever its expires_at. A Limit of zero or less deletes nothing
// and returns 0. One instance sweeps a table at a time (a GET_LOCK named
// after the database and table); the others return 0 at once. The DELETE
// runs in a READ COMMITTED transaction, so it locks the rows it deletes and
// no gaps: claims, which touch live rows, do not wait for it.
func (s *Store) Sweep(ctx context.Context, req idem.SweepRequest) (int, error) {
	if req.Limit <= 0 {
		return 0, nil
	}
	var n int64
	_, err := s.withNamedLock(ctx, "sweep", 0, func(conn *sql.Conn) error {
		return retry(ctx, func() error {
			tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return err
			}
			now := sqlrecord.MS(req.Now)
			res, err := tx.ExecContext(ctx, s.q.sweep, now, now, req.Limit)
			if err != nil {
				tx.Rollback()
				return err
			}
			if n, err = res.RowsAffected(); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		})
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}
