package docs

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/mysql"
	"github.com/idemgo/idem/store/postgres"
	redisidem "github.com/idemgo/idem/store/redis"
	"github.com/idemgo/idem/store/sqlite"
)

// The stores' blocks, compiled: each function below holds page blocks
// between a "// block: NAME" line and a "// block end" line;
// TestGoBlocksCompiled checks that every Go block of the pages is one of
// them, so a snippet that stops compiling fails the build, and one that
// drifts from the code fails the test. The SQLite and memory ones also run.

// What the snippets assume of the reader's program.
type event struct {
	ID   string
	Data []byte
}

type mailAPI struct{}

func (mailAPI) Send(ctx context.Context, key string, e event) ([]byte, error) {
	return []byte("mail-1"), nil
}

var (
	evt  = event{ID: "evt-1", Data: []byte(`{"to":"ada@example.com"}`)}
	mail mailAPI
)

func readmeSQLite(ctx context.Context) error {
	// block: sqlite
	store, err := sqlite.Open("idem.db", sqlite.Options{}) // or sqlite.New(db, ...) on your *sql.DB
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil { // or: idem migrate --store sqlite://idem.db
		return err
	}
	// block end
	return readmeTwoPhase(ctx, store)
}

func readmePostgres(ctx context.Context) error {
	// block: postgres
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := postgres.New(pool, postgres.Options{}) // Options.Table: another table than idem_records
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil { // or: idem migrate --store postgres://app@127.0.0.1:5432/app
		return err
	}
	// block end
	return readmeTwoPhase(ctx, store)
}

func readmeMySQL(ctx context.Context) error {
	// block: mysql
	store, err := mysql.Open("app@tcp(127.0.0.1:3306)/app", mysql.Options{}) // or mysql.New(db, ...)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil { // or: idem migrate --store mysql://app@127.0.0.1:3306/app
		return err
	}
	// block end
	return readmeTwoPhase(ctx, store)
}

func readmeRedis(ctx context.Context) error {
	// block: redis
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // any redis.UniversalClient
	defer rdb.Close()
	store, err := redisidem.New(rdb, redisidem.Options{}) // no schema: nothing to migrate
	if err != nil {
		return err
	}
	// block end
	return readmeTwoPhase(ctx, store)
}

func readmeMemory(ctx context.Context) error {
	// block: memory
	store := memory.New() // tests and single-process programs: nothing survives a restart
	// block end
	return readmeTwoPhase(ctx, store)
}

func readmeTwoPhase(ctx context.Context, store idem.Store) error {
	// block: two-phase
	g, err := idem.New(store, idem.Options{Scope: "mailer", Lease: 30 * time.Second})
	if err != nil {
		return err
	}
	res, err := g.Do(ctx, idem.Message{ID: evt.ID, Payload: evt.Data}, func(ctx context.Context) ([]byte, error) {
		// The key derived from the message's key lets the mail API deduplicate a retried call.
		return mail.Send(ctx, idem.DeriveKey(ctx, "send"), evt)
	})
	switch idem.Decide(res, err) {
	case idem.ActionAck: // processed, or a duplicate (res.Value is the recorded result)
	case idem.ActionRetry: // in progress elsewhere, a transient failure (claim released), store down
	case idem.ActionDeadLetter: // conflict, permanent error, no key: idem.DeadLetterReason(err) says which
	}
	// block end
	return err
}

func readmeInbox(ctx context.Context, pgStore *postgres.Store, msg idem.Message, id string, amount int64) error {
	// block: inbox
	g, err := idem.New(pgStore, idem.Options{Scope: "billing"})
	if err != nil {
		return err
	}
	res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		_, err := tx.Exec(ctx, `insert into charges(order_id, amount) values ($1, $2)`, id, amount)
		return nil, err
	})
	// block end
	_ = res
	return err
}

// The snippets that need a server only compile here (their DSNs are the
// reader's); the rest run.
var _ = []any{readmePostgres, readmeMySQL, readmeRedis, readmeInbox}

func TestStoreBlocksRun(t *testing.T) {
	t.Chdir(t.TempDir()) // sqlite.Open("idem.db") creates its file here
	for name, f := range map[string]func(context.Context) error{"sqlite": readmeSQLite, "memory": readmeMemory} {
		if err := f(context.Background()); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
