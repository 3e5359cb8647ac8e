package demo

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
)

// pgLedger is sqlLedger on PostgreSQL through pgx: the charge, the balance
// and idem's marker commit in one pgx.Tx (idem.DoTx[pgx.Tx]).
type pgLedger struct {
	pool      *pgxpool.Pool
	chargesT  string
	accountsT string
}

func newPGLedger(ctx context.Context, pool *pgxpool.Pool, runID string) (*pgLedger, error) {
	l := &pgLedger{pool: pool, chargesT: "idem_demo_charges_" + runID, accountsT: "idem_demo_accounts_" + runID}
	for _, q := range []string{
		`CREATE TABLE ` + l.chargesT + ` (order_id text NOT NULL, account text NOT NULL, amount bigint NOT NULL)`,
		`CREATE TABLE ` + l.accountsT + ` (account text PRIMARY KEY, balance bigint NOT NULL)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			_ = l.close(ctx)
			return nil, fmt.Errorf("create the demo's ledger tables: %w", err)
		}
	}
	return l, nil
}

func (l *pgLedger) mode() string { return "tx" }

func (l *pgLedger) process(ctx context.Context, g *idem.Guard, msg idem.Message, o Order, fail bool) (idem.Result, error) {
	return idem.DoTx(ctx, g, msg, func(ctx context.Context, tx pgx.Tx) ([]byte, error) { return l.charge(ctx, tx, o, fail) })
}

// charge is the work process runs in the marker's transaction.
func (l *pgLedger) charge(ctx context.Context, tx pgx.Tx, o Order, fail bool) ([]byte, error) {
	if fail {
		return nil, errDownstream
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+l.chargesT+` (order_id, account, amount) VALUES ($1, $2, $3)`,
		o.ID, o.Account, o.Amount); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+l.accountsT+` (account, balance) VALUES ($1, $2)
		ON CONFLICT (account) DO UPDATE SET balance = `+l.accountsT+`.balance + excluded.balance`, o.Account, o.Amount); err != nil {
		return nil, err
	}
	return receipt(o), nil
}

func (l *pgLedger) charges(ctx context.Context) ([]Order, error) {
	rows, err := l.pool.Query(ctx, `SELECT order_id, account, amount FROM `+l.chargesT)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Order, error) {
		var o Order
		err := r.Scan(&o.ID, &o.Account, &o.Amount)
		return o, err
	})
}

func (l *pgLedger) balances(ctx context.Context) (map[string]int64, error) {
	rows, err := l.pool.Query(ctx, `SELECT account, balance FROM `+l.accountsT)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			a string
			b int64
		)
		if err := rows.Scan(&a, &b); err != nil {
			return nil, err
		}
		out[a] = b
	}
	return out, rows.Err()
}

func (l *pgLedger) close(ctx context.Context) error {
	var errs []error
	for _, t := range []string{l.chargesT, l.accountsT} {
		if _, err := l.pool.Exec(ctx, `DROP TABLE IF EXISTS `+t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
