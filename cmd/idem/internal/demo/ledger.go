package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/idemgo/idem"
)

// errDownstream is the transient handler failure the chaos injects.
var errDownstream = errors.New("payment service timed out (injected)")

// ledger applies the charges of idem's consumers: exactly once per order,
// through the transactional inbox or the two-phase guard.
type ledger interface {
	// mode is "tx" (charge and marker in one transaction) or "two-phase".
	mode() string
	// process runs one delivery through idem; fail makes the handler fail
	// before it charges anything.
	process(ctx context.Context, g *idem.Guard, msg idem.Message, o Order, fail bool) (idem.Result, error)
	// charges returns every charge applied, in no particular order.
	charges(ctx context.Context) ([]Order, error)
	// balances returns each account's balance as the ledger maintains it
	// (separately from the charges, so a half-applied charge shows).
	balances(ctx context.Context) (map[string]int64, error)
	// close drops what the ledger created (its tables).
	close(ctx context.Context) error
}

func receipt(o Order) []byte {
	return []byte(fmt.Sprintf(`{"charged":%q,"amount":%d}`, o.ID, o.Amount))
}

// memLedger keeps the ledger in memory under a mutex. idem's consumers use
// it in two-phase mode (the side effect cannot join the store's
// transaction); the naive consumer applies to one directly.
type memLedger struct {
	mu      sync.Mutex
	applied []Order
	bal     map[string]int64
}

func newMemLedger() *memLedger { return &memLedger{bal: map[string]int64{}} }

func (l *memLedger) apply(o Order) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applied = append(l.applied, o)
	l.bal[o.Account] += o.Amount
}

func (l *memLedger) mode() string { return "two-phase" }

func (l *memLedger) process(ctx context.Context, g *idem.Guard, msg idem.Message, o Order, fail bool) (idem.Result, error) {
	return g.Do(ctx, msg, func(context.Context) ([]byte, error) { return l.charge(o, fail) })
}

// charge is the work process runs under the guard.
func (l *memLedger) charge(o Order, fail bool) ([]byte, error) {
	if fail {
		return nil, errDownstream
	}
	l.apply(o)
	return receipt(o), nil
}

func (l *memLedger) charges(context.Context) ([]Order, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Order(nil), l.applied...), nil
}

func (l *memLedger) balances(context.Context) (map[string]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int64, len(l.bal))
	for k, v := range l.bal {
		out[k] = v
	}
	return out, nil
}

func (l *memLedger) close(context.Context) error { return nil }

// sqlLedger keeps the ledger in the store's own SQL database: each charge is
// inserted, and the account balance updated, in the same transaction as
// idem's inbox marker (idem.DoTx). Commit makes all three durable or none.
type sqlLedger struct {
	db        *sql.DB
	chargesT  string
	accountsT string
	upsert    string // adds to an account's balance, creating it if needed
}

// newSQLLedger creates the run's ledger tables. The charges table has no
// unique constraint on the order id on purpose: a double charge must be
// visible, not prevented by the schema.
func newSQLLedger(ctx context.Context, db *sql.DB, runID, dialect string) (*sqlLedger, error) {
	l := &sqlLedger{db: db, chargesT: "idem_demo_charges_" + runID, accountsT: "idem_demo_accounts_" + runID}
	l.upsert = `INSERT INTO ` + l.accountsT + ` (account, balance) VALUES (?, ?)
		ON CONFLICT (account) DO UPDATE SET balance = ` + l.accountsT + `.balance + excluded.balance`
	if dialect == "mysql" {
		l.upsert = `INSERT INTO ` + l.accountsT + ` (account, balance) VALUES (?, ?)
			ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance)`
	}
	for _, q := range []string{
		`CREATE TABLE ` + l.chargesT + ` (order_id VARCHAR(64) NOT NULL, account VARCHAR(64) NOT NULL, amount BIGINT NOT NULL)`,
		`CREATE TABLE ` + l.accountsT + ` (account VARCHAR(64) PRIMARY KEY, balance BIGINT NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			_ = l.close(ctx)
			return nil, fmt.Errorf("create the demo's ledger tables: %w", err)
		}
	}
	return l, nil
}

func (l *sqlLedger) mode() string { return "tx" }

func (l *sqlLedger) process(ctx context.Context, g *idem.Guard, msg idem.Message, o Order, fail bool) (idem.Result, error) {
	return idem.DoTx(ctx, g, msg, func(ctx context.Context, tx *sql.Tx) ([]byte, error) { return l.charge(ctx, tx, o, fail) })
}

// charge is the work process runs in the marker's transaction.
func (l *sqlLedger) charge(ctx context.Context, tx *sql.Tx, o Order, fail bool) ([]byte, error) {
	if fail {
		return nil, errDownstream
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+l.chargesT+` (order_id, account, amount) VALUES (?, ?, ?)`,
		o.ID, o.Account, o.Amount); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, l.upsert, o.Account, o.Amount); err != nil {
		return nil, err
	}
	return receipt(o), nil
}

func (l *sqlLedger) charges(ctx context.Context) ([]Order, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT order_id, account, amount FROM `+l.chargesT)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Order
	for rows.Next() {
		var o Order
		if err := rows.Scan(&o.ID, &o.Account, &o.Amount); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

func (l *sqlLedger) balances(ctx context.Context) (map[string]int64, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT account, balance FROM `+l.accountsT)
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

// close drops the run's tables: a demo leaves nothing behind, even in a
// database the user pointed it at.
func (l *sqlLedger) close(ctx context.Context) error {
	var errs []error
	for _, t := range []string{l.chargesT, l.accountsT} {
		if _, err := l.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
