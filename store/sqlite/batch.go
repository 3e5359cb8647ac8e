package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
	"github.com/idemgo/idem/store/storekit"
)

// batchRows bounds the rows of one multi-row insert (12 parameters a row,
// far below SQLite's limit on bound parameters).
const batchRows = 500

// ClaimBatch implements storekit.BatchStore: every claim in one write
// transaction (one commit, one sync). New keys, the common case of a poll,
// are inserted with multi-row conflict-free inserts that return the keys
// they wrote; only keys that exist already go through the read, apply and
// write of a single claim.
//
// Every request is prepared first (its own random NewToken, its fingerprint
// as stored): a rejected request, or a repeated key
// (idem.ErrDuplicateKeyInBatch), fails the batch before anything is written.
func (s *Store) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	if err := storekit.CheckBatchKeys("claim batch", reqs); err != nil {
		return nil, err
	}
	prepared := make([]idem.ClaimRequest, len(reqs))
	for i, req := range reqs {
		p, err := prepare(req)
		if err != nil {
			return nil, err
		}
		prepared[i] = p
	}
	reqs = prepared
	out := make([]idem.Claim, len(reqs))
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		done := make([]bool, len(reqs))
		for lo := 0; lo < len(reqs); lo += batchRows {
			if err := s.insertNew(ctx, tx, reqs, lo, min(lo+batchRows, len(reqs)), out, done); err != nil {
				return err
			}
		}
		for i, req := range reqs {
			if done[i] {
				continue
			}
			c, err := s.claimTx(ctx, tx, req)
			if err != nil {
				return fmt.Errorf("claim %s: %w", req.Key, err)
			}
			out[i] = c
		}
		return nil
	})
	if err != nil {
		return nil, dataErr("claim batch", fmt.Errorf("sqlite: claim batch: %w", err))
	}
	return out, nil
}

// insertNew inserts fresh records for reqs[lo:hi] whose keys are absent and
// marks them done with the claim storekit.ApplyClaim gives on an absent record.
func (s *Store) insertNew(ctx context.Context, tx *sql.Tx, reqs []idem.ClaimRequest, lo, hi int, out []idem.Claim, done []bool) error {
	type rk struct{ scope, id string }
	fresh := make(map[rk]int, hi-lo)
	var (
		b    strings.Builder
		args = make([]any, 0, (hi-lo)*12)
	)
	b.WriteString("INSERT INTO " + quoteIdent(s.opts.Table) + " (" + sqlrecord.Columns + ") VALUES ")
	for i := lo; i < hi; i++ {
		k := rk{reqs[i].Key.Scope, reqs[i].Key.StoredID()}
		if _, dup := fresh[k]; dup {
			continue // a repeated key is claimed singly, after its first
		}
		c, _ := storekit.ApplyClaim(nil, reqs[i])
		fresh[k] = i
		out[i] = c
		if len(args) > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
		args = append(args, recordArgs(c.Record)...)
	}
	b.WriteString(" ON CONFLICT (scope, id) DO NOTHING RETURNING scope, id")
	rows, err := tx.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k rk
		if err := rows.Scan(&k.scope, &k.id); err != nil {
			return err
		}
		if i, ok := fresh[k]; ok {
			done[i] = true
		}
	}
	return rows.Err()
}
