package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
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
// expires_at index; an in-progress record, live or stale, is never
// deleted, whatever its expires_at. A Limit of zero or less deletes nothing
// and returns 0. One instance sweeps a table at a time (a GET_LOCK named
// after the database and table); the others return 0 at once.
//
// The sweep never waits for a row lock, so it is never in a deadlock: it
// first locks a batch of expired rows with SKIP LOCKED (MariaDB 10.6, MySQL
// 8.0), passing over rows a claim, complete or renewal holds right now, and
// then deletes the rows it holds by primary key. A single DELETE ... ORDER BY
// expires_at LIMIT n would lock each row's expires_at index entry before
// its primary-key record, while a complete or renewal moving expires_at
// locks them the other way round: the two deadlocked (error 1213). Both
// steps run in a READ COMMITTED transaction, so they lock the rows they find
// and no gaps: claims, which touch live rows, do not wait for them.
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
			defer tx.Rollback() // after Commit a no-op
			if n, err = s.sweepOnce(ctx, tx, sqlrecord.MS(req.Now), req.Limit); err != nil {
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

// sweepChunk bounds the keys of one DELETE (two placeholders each).
const sweepChunk = 1000

// sweepOnce locks up to limit expired rows and deletes them, in tx.
func (s *Store) sweepOnce(ctx context.Context, tx *sql.Tx, now int64, limit int) (int64, error) {
	rows, err := tx.QueryContext(ctx, s.q.sweepVictims, now, limit)
	if err != nil {
		return 0, err
	}
	var keys []rkey
	for rows.Next() {
		var k rkey
		if err := rows.Scan(&k.scope, &k.id); err != nil {
			rows.Close()
			return 0, err
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var n int64
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), sweepChunk)]
		keys = keys[len(chunk):]
		query, args := s.sweepDelete(now, chunk)
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, err
		}
		d, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		n += d
	}
	return n, nil
}

// sweepDelete is the DELETE of the locked rows keys (in the order the
// victims query returned them, oldest first), grouped by scope so that the
// optimizer sees primary-key ranges. It repeats the expired condition,
// which the locks keep true, so that the statement alone never deletes a
// live record.
func (s *Store) sweepDelete(now int64, keys []rkey) (string, []any) {
	var b strings.Builder
	b.WriteString(s.q.sweepDelete)
	args := make([]any, 0, 1+len(keys)+len(keys)/4)
	args = append(args, now)
	byScope := map[string][]string{}
	var scopes []string
	for _, k := range keys {
		if _, ok := byScope[k.scope]; !ok {
			scopes = append(scopes, k.scope)
		}
		byScope[k.scope] = append(byScope[k.scope], k.id)
	}
	for i, sc := range scopes {
		if i > 0 {
			b.WriteString(" OR ")
		}
		ids := byScope[sc]
		b.WriteString("(scope = ? AND id IN (" + quoteList(len(ids), "?") + "))")
		args = append(args, sc)
		for _, id := range ids {
			args = append(args, id)
		}
	}
	b.WriteString(")")
	return b.String(), args
}
