package bench

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// txOp marks one key in a transaction of the store's transactional inbox
// (begin, mark, commit) with no business write: the cost idem adds to a
// transaction the consumer has anyway.
func txOp(g *idem.Guard, h *dsn.Handle) (op, error) {
	if _, ok := h.Store.(idem.TxStore[*sql.Tx]); ok {
		return func(ctx context.Context, w, i int) (int, error) {
			return 1, processed(idem.DoTx(ctx, g, idem.Message{ID: fmt.Sprintf("k-%d-%d", w, i)},
				func(context.Context, *sql.Tx) ([]byte, error) { return nil, nil }))
		}, nil
	}
	if _, ok := h.Store.(idem.TxStore[pgx.Tx]); ok {
		return func(ctx context.Context, w, i int) (int, error) {
			return 1, processed(idem.DoTx(ctx, g, idem.Message{ID: fmt.Sprintf("k-%d-%d", w, i)},
				func(context.Context, pgx.Tx) ([]byte, error) { return nil, nil }))
		}, nil
	}
	return nil, fmt.Errorf("%w: the %s store has no transactional inbox; use --mode two-phase or batch", ErrMode, h.Scheme)
}
