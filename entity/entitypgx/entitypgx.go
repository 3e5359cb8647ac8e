// Package entitypgx runs package entity's helpers on pgx: an entity.Querier
// over a pgx.Tx, and a bookkeeping-free idem.TxStore[pgx.Tx] whose
// transactions are pgx transactions, for entity mode through idem.NewInbox,
// idem.DoTx and the broker integrations.
//
//	orders := &entity.Table{Dialect: entity.Postgres, Name: "orders", KeyColumn: "order_id", FingerprintColumn: "fp"}
//	g, _ := idem.NewInbox(entitypgx.NewStore(pool), idem.Options{Scope: "orders"})
//	idem.DoTx(ctx, g, msg, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
//		return nil, orders.Insert(ctx, entitypgx.Querier(tx), id, fp, cols, vals)
//	})
package entitypgx

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity"
	"github.com/idemgo/idem/internal/pgxtx"
)

// DB is what Querier needs: pgx.Tx, *pgxpool.Pool and *pgx.Conn have it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Querier adapts a pgx transaction (or pool, or connection) to entity.Querier.
func Querier(db DB) entity.Querier { return querier{db} }

type querier struct{ db DB }

func (q querier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.db.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (q querier) QueryRow(ctx context.Context, query string, dest []any, args ...any) error {
	err := q.db.QueryRow(ctx, query, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sql.ErrNoRows
	}
	return err
}

// Store is the pgx counterpart of entity.Store: no records, Mark always
// acquires (the business insert decides), InTx runs a pgx transaction on
// the pool. Like entity.Store it is an idem.TxStore but not an idem.Store:
// give it to idem.NewInbox; idem.New does not compile with it.
type Store struct {
	entity.NoRecords[pgx.Tx]
	pool *pgxpool.Pool
}

var _ idem.TxStore[pgx.Tx] = (*Store)(nil)

// NewStore returns a bookkeeping-free store whose transactions run on pool.
// Give it to idem.NewInbox, not idem.New.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// InTx runs fn in a pgx transaction on a connection of the pool: commit on
// nil, rollback otherwise (or on a panic), like pgx.BeginFunc. The BEGIN is
// not sent on its own: it travels in one batch with fn's first statement
// (the business insert, in entity mode), so the transaction costs the
// round trips of its own statements and its COMMIT, one fewer than
// pgx.BeginFunc. An error of the BEGIN comes back from that first statement.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	return pgxtx.Run(ctx, c.Conn(), pgx.TxOptions{}, fn)
}
