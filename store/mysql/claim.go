package mysql

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"strings"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
	"github.com/idemgo/idem/store/storekit"
)

// errVanished: the record existed when the insert ran and was gone (swept)
// when the transaction looked for it. Retried.
var errVanished = errors.New("mysql: record vanished between insert and lock")

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// insertIfAbsent inserts r unless a record exists for its key, and reports
// whether it inserted.
func (s *Store) insertIfAbsent(ctx context.Context, e execer, r idem.Record) (bool, error) {
	res, err := e.ExecContext(ctx, s.q.insertIfAbsent, rowArgs(r)...)
	if err != nil {
		return false, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return false, err
	}
	return id == 0, nil
}

// Claim implements idem.Store.
//
// req is Prepare'd first: its times checked, its fingerprint stored as text,
// its NewToken drawn, which a claim that inserts the record takes (a record
// that still exists counts on from its own token).
//
// The common case, an unseen key, is one autocommit statement: an insert that
// does nothing when the key exists. When it exists, a READ COMMITTED
// transaction locks that one record (SELECT .. FOR UPDATE on the primary key),
// applies storekit.ApplyClaim and writes the result back. Concurrent claimers of a
// key queue on its record lock and each sees its predecessor's outcome; they
// never lock a gap, so claims of other keys never wait for them.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return idem.Claim{}, err
	}
	fresh, _ := storekit.ApplyClaim(nil, req)
	var out idem.Claim
	err = retry(ctx, func() error {
		inserted, err := s.insertIfAbsent(ctx, s.db, fresh.Record)
		if err != nil {
			return err
		}
		if inserted {
			out = fresh
			return nil
		}
		return s.inTxRC(ctx, func(tx *sql.Tx) error {
			cur, err := sqlrecord.Scan(tx.QueryRowContext(ctx, s.q.getForUpdate, req.Key.Scope, req.Key.StoredID()))
			if errors.Is(err, sql.ErrNoRows) {
				return errVanished
			}
			if err != nil {
				return err
			}
			c, write := storekit.ApplyClaim(&cur, req)
			if write {
				if _, err := tx.ExecContext(ctx, s.q.update, updateArgs(c.Record)...); err != nil {
					return err
				}
			}
			out = c
			return nil
		})
	})
	if err != nil {
		return idem.Claim{}, dataErr("claim", err)
	}
	return out, nil
}

// maxBatch bounds the rows of one batch statement (placeholders and packet
// size); larger batches run as several transactions of maxBatch keys.
const maxBatch = 1000

// ClaimBatch implements storekit.BatchStore. Each chunk of up to 1000 keys is one
// READ COMMITTED transaction whose first statement does the locking, in one
// pass in primary-key order: a multi-row INSERT .. ON DUPLICATE KEY UPDATE
// token = -token inserts the absent keys and marks the existing records by
// negating their token (committed tokens are >= 1). Taking every lock in one
// ordered pass is what keeps concurrent batches from deadlocking: two
// batches meet at their first common key and the second waits there holding
// only smaller keys. Inserted rows count 1 and changed rows 2 in the affected
// rows whatever clientFoundRows says, so when the count equals the number of
// keys every key was new and the batch is done in that one statement.
// Otherwise one read fetches the marked records, storekit.ApplyClaim decides each,
// and one multi-row statement writes them back (taken, or restored as they
// were). Every request is Prepare'd first, so each fresh record takes its own
// request's NewToken, the fast path included.
//
// Batches over 1000 keys commit chunk by chunk: when a later chunk fails, the
// keys of the earlier ones stay claimed in progress and are retaken once
// their lease ends, like those of a consumer that crashed.
func (s *Store) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	reqs, err := storekit.PrepareClaimBatch(reqs)
	if err != nil {
		return nil, err
	}
	out := make([]idem.Claim, len(reqs))
	for start := 0; start < len(reqs); start += maxBatch {
		end := min(start+maxBatch, len(reqs))
		err := retry(ctx, func() error {
			return s.inTxRC(ctx, func(tx *sql.Tx) error {
				return s.claimChunk(ctx, tx, reqs[start:end], out[start:end])
			})
		})
		if err != nil {
			return nil, dataErr("claim batch", err)
		}
	}
	return out, nil
}

type rkey struct{ scope, id string }

func keyOf(k idem.Key) rkey { return rkey{k.Scope, k.StoredID()} }

func (s *Store) claimChunk(ctx context.Context, tx *sql.Tx, reqs []idem.ClaimRequest, out []idem.Claim) error {
	order := make([]int, len(reqs))
	keys := make([]rkey, len(reqs))
	for i, r := range reqs {
		order[i], keys[i] = i, keyOf(r.Key)
	}
	sort.Slice(order, func(a, b int) bool {
		ka, kb := keys[order[a]], keys[order[b]]
		return ka.scope < kb.scope || (ka.scope == kb.scope && ka.id < kb.id)
	})
	fresh := make([]idem.Record, len(order))
	for j, i := range order {
		c, _ := storekit.ApplyClaim(nil, reqs[i])
		out[i], fresh[j] = c, c.Record
	}
	res, err := tx.ExecContext(ctx, s.multiRow(len(fresh), "token = -token"), multiArgs(fresh)...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == int64(len(fresh)) {
		return nil // every key was absent: the fresh records are in
	}
	existing, err := s.readMarked(ctx, tx, keys, order)
	if err != nil {
		return err
	}
	index := make(map[rkey]int, len(keys))
	for i, k := range keys {
		index[k] = i
	}
	back := make([]idem.Record, 0, len(existing))
	for _, cur := range existing {
		cur.Token = -cur.Token
		i := index[rkey{cur.Scope, cur.ID}]
		c, write := storekit.ApplyClaim(&cur, reqs[i])
		out[i] = c
		if write {
			back = append(back, c.Record)
		} else {
			back = append(back, cur)
		}
	}
	_, err = tx.ExecContext(ctx, s.multiRow(len(back), overwrite), multiArgs(back)...)
	return err
}

// overwrite rewrites every mutable column of rows the batch holds locked.
// VALUES(col) is understood by MariaDB and MySQL alike.
const overwrite = "display_id = VALUES(display_id), state = VALUES(state), fingerprint = VALUES(fingerprint)," +
	" result = VALUES(result), token = VALUES(token), attempts = VALUES(attempts), lease_until = VALUES(lease_until)," +
	" expires_at = VALUES(expires_at), created_at = VALUES(created_at), updated_at = VALUES(updated_at)"

func (s *Store) multiRow(n int, onDup string) string {
	row := "(" + quoteList(nColumns, "?") + ")"
	return "INSERT INTO " + s.table + " (" + sqlrecord.Columns + ") VALUES " + quoteList(n, row) + " ON DUPLICATE KEY UPDATE " + onDup
}

func multiArgs(rs []idem.Record) []any {
	args := make([]any, 0, len(rs)*nColumns)
	for _, r := range rs {
		args = append(args, rowArgs(r)...)
	}
	return args
}

// readMarked reads the records of keys whose token the batch negated (the
// ones that existed), in primary-key order. The batch already holds their
// locks; the read is a locking one so that it returns the current versions at
// any isolation level. Grouping by scope lets the optimizer see primary-key
// ranges.
func (s *Store) readMarked(ctx context.Context, tx *sql.Tx, keys []rkey, order []int) ([]idem.Record, error) {
	var (
		where strings.Builder
		args  = make([]any, 0, 2*len(keys))
	)
	for i := 0; i < len(order); {
		scope := keys[order[i]].scope
		j := i
		for j < len(order) && keys[order[j]].scope == scope {
			j++
		}
		if where.Len() > 0 {
			where.WriteString(" OR ")
		}
		where.WriteString("(scope = ? AND id IN (" + quoteList(j-i, "?") + "))")
		args = append(args, scope)
		for _, k := range order[i:j] {
			args = append(args, keys[k].id)
		}
		i = j
	}
	rows, err := tx.QueryContext(ctx, "SELECT "+sqlrecord.Columns+" FROM "+s.table+" WHERE ("+where.String()+
		") AND token < 0 ORDER BY scope, id FOR UPDATE", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return sqlrecord.ScanAll(rows)
}
