package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/store/postgres"
	redisidem "github.com/idemgo/idem/store/redis"
)

// ledger is a consumer's side of the store: the connections, idem's store
// over them (nil for the naive consumer) and the charge the order makes,
// the same whatever the broker.
type ledger struct {
	kind  string
	pool  *pgxpool.Pool // postgres
	db    *sql.DB       // mysql, sqlite
	rdb   *goredis.Client
	h     *dsn.Handle
	store idem.Store
	bank  *http.Client
	cfg   childConfig
	kill  *killer
	fails *failer
}

// withTable adds the records table to a mysql:// or sqlite:// DSN.
func withTable(url, table string) string {
	if table == "" {
		return url
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "table=" + table
}

func openLedger(ctx context.Context, cfg childConfig, kill *killer) (*ledger, error) {
	l := &ledger{kind: cfg.Store, cfg: cfg, kill: kill, bank: &http.Client{Timeout: 5 * time.Second}}
	var err error
	if l.fails, err = openFailer(cfg.Fails); err != nil {
		return nil, err
	}
	switch cfg.Store {
	case "postgres":
		if l.pool, err = pgxpool.New(ctx, cfg.StoreURL); err != nil {
			return nil, err
		}
		if !cfg.Naive {
			l.store, err = postgres.New(l.pool, postgres.Options{Table: cfg.Tables.Records})
		}
	case "mysql", "sqlite":
		table := cfg.Tables.Records
		if cfg.Naive {
			table = ""
		}
		if l.h, err = dsn.Open(ctx, withTable(cfg.StoreURL, table)); err != nil {
			return nil, err
		}
		l.db = l.h.SQL
		if !cfg.Naive {
			l.store = l.h.Store
		}
	case "redis":
		var opt *goredis.Options
		if opt, err = goredis.ParseURL(cfg.StoreURL); err != nil {
			return nil, err
		}
		l.rdb = goredis.NewClient(opt)
		if !cfg.Naive {
			l.store, err = redisidem.New(l.rdb, redisidem.Options{Prefix: cfg.Prefix})
		}
	default:
		return nil, fmt.Errorf("unknown store %q", cfg.Store)
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

func (l *ledger) close() {
	switch {
	case l.pool != nil:
		l.pool.Close()
	case l.h != nil:
		l.h.Close()
	case l.rdb != nil:
		l.rdb.Close()
	}
}

// options are the guard's options: two-phase takes the short lease the
// kills need to be retaken within the run, and retakes a killed
// consumer's claims (idem.StaleRetake, chosen over the default park)
// because its one side effect, the bank's charge, carries the key derived
// with idem.DeriveKey, which the bank deduplicates: the retake repeats the
// call, never the charge. The inbox never takes a stale record over. The
// observer logs what the consumer handled by itself.
func (l *ledger) options() idem.Options {
	if l.kind == "redis" {
		return idem.Options{Lease: l.cfg.Lease, Stale: idem.StaleRetake, Observer: errorLog{}}
	}
	return idem.Options{Observer: errorLog{}}
}

// chargeSQL writes the charge row and the balance update in tx (MariaDB,
// SQLite).
func chargeSQL(ctx context.Context, tx *sql.Tx, kind string, t tables, o Order) error {
	if _, err := tx.ExecContext(ctx, `insert into `+t.Charges+` (order_id, account, amount, pid) values (?, ?, ?, ?)`,
		o.Order, o.Account, o.Amount, os.Getpid()); err != nil {
		return err
	}
	upsert := `insert into ` + t.Balances + ` (account, balance) values (?, ?)
		on conflict (account) do update set balance = balance + excluded.balance`
	if kind == "mysql" {
		upsert = `insert into ` + t.Balances + ` (account, balance) values (?, ?)
		on duplicate key update balance = balance + values(balance)`
	}
	_, err := tx.ExecContext(ctx, upsert, o.Account, o.Amount)
	return err
}

// The handlers each broker's adapter runs: the same charge, given the
// payload, for the transactional inbox on PostgreSQL (pgTx), on MariaDB or
// SQLite (sqlTx), and two-phase with the bank (plain).

// order decodes the payload and fails it if the plan says so: a handler
// failure before any effect.
func (l *ledger) order(data []byte) (Order, error) {
	o, err := decode(data)
	if err == nil {
		err = l.fails.fail(o.Order)
	}
	return o, err
}

func (l *ledger) pgTx(ctx context.Context, tx pgx.Tx, data []byte) error {
	o, err := l.order(data)
	if err != nil {
		return err
	}
	if err := charge(ctx, tx, l.cfg.Tables, o); err != nil {
		return err
	}
	l.kill.pass(pointEffect) // written, not committed: the transaction dies with the process
	return nil
}

func (l *ledger) sqlTx(ctx context.Context, tx *sql.Tx, data []byte) error {
	o, err := l.order(data)
	if err != nil {
		return err
	}
	if err := chargeSQL(ctx, tx, l.kind, l.cfg.Tables, o); err != nil {
		return err
	}
	l.kill.pass(pointEffect)
	return nil
}

func (l *ledger) plain(ctx context.Context, data []byte) error {
	o, err := l.order(data)
	if err != nil {
		return err
	}
	if err := callBank(ctx, l.bank, l.cfg.BankURL, idem.DeriveKey(ctx, "charge"), o); err != nil {
		return err
	}
	l.kill.pass(pointEffect) // the bank has charged; the record is not completed
	return nil
}

// handlerFor builds a broker adapter's handler of the ledger's kind from
// the adapter's Handle and HandleTx constructors.
func handlerFor[M, H any](l *ledger, data func(M) []byte,
	handle func(func(context.Context, M) ([]byte, error)) H,
	pgTx func(func(context.Context, pgx.Tx, M) ([]byte, error)) H,
	sqlTx func(func(context.Context, *sql.Tx, M) ([]byte, error)) H) H {
	switch l.kind {
	case "postgres":
		return pgTx(func(ctx context.Context, tx pgx.Tx, m M) ([]byte, error) { return nil, l.pgTx(ctx, tx, data(m)) })
	case "mysql", "sqlite":
		return sqlTx(func(ctx context.Context, tx *sql.Tx, m M) ([]byte, error) { return nil, l.sqlTx(ctx, tx, data(m)) })
	}
	return handle(func(ctx context.Context, m M) ([]byte, error) { return nil, l.plain(ctx, data(m)) })
}

// errPoison is the naive consumer's verdict on a payload it cannot decode:
// dropped, as a naive consumer drops what it cannot read.
var errPoison = errors.New("poison")

// naive is the charge without idem: in its own transaction (or a bank call
// without a key), committed, then acked by the caller. Every redelivery
// and producer retry charges again.
func (l *ledger) naive(ctx context.Context, data []byte) error {
	o, err := decode(data)
	if err != nil {
		return errPoison
	}
	switch {
	case l.pool != nil:
		err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
			if err := charge(ctx, tx, l.cfg.Tables, o); err != nil {
				return err
			}
			l.kill.pass(pointEffect)
			return nil
		})
	case l.db != nil:
		var tx *sql.Tx
		if tx, err = l.db.BeginTx(ctx, nil); err != nil {
			return err
		}
		if err = chargeSQL(ctx, tx, l.kind, l.cfg.Tables, o); err != nil {
			tx.Rollback()
			return err
		}
		l.kill.pass(pointEffect)
		err = tx.Commit()
	default:
		err = callBank(ctx, l.bank, l.cfg.BankURL, "", o)
		l.kill.pass(pointEffect)
	}
	return err
}
