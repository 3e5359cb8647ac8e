package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/mysql"
	"github.com/idemgo/idem/store/postgres"
	redisidem "github.com/idemgo/idem/store/redis"
	"github.com/idemgo/idem/store/sqlite"
)

// The README's quick start, compiled. Each function below holds README code
// blocks between a "// README: NAME" line and a "// README end" line;
// TestREADMEQuickStart checks that README.md shows each block as it is here,
// so a snippet that stops compiling fails the build, and one that drifts
// from the code fails the test. The SQLite and memory ones also run.

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
	// README: sqlite
	store, err := sqlite.Open("idem.db", sqlite.Options{}) // or sqlite.New(db, ...) on your *sql.DB
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil { // or: idem migrate --store sqlite://idem.db
		return err
	}
	// README end
	return readmeTwoPhase(ctx, store)
}

func readmePostgres(ctx context.Context) error {
	// README: postgres
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
	// README end
	return readmeTwoPhase(ctx, store)
}

func readmeMySQL(ctx context.Context) error {
	// README: mysql
	store, err := mysql.Open("app@tcp(127.0.0.1:3306)/app", mysql.Options{}) // or mysql.New(db, ...)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil { // or: idem migrate --store mysql://app@127.0.0.1:3306/app
		return err
	}
	// README end
	return readmeTwoPhase(ctx, store)
}

func readmeRedis(ctx context.Context) error {
	// README: redis
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // any redis.UniversalClient
	defer rdb.Close()
	store, err := redisidem.New(rdb, redisidem.Options{}) // no schema: nothing to migrate
	if err != nil {
		return err
	}
	// README end
	return readmeTwoPhase(ctx, store)
}

func readmeMemory(ctx context.Context) error {
	// README: memory
	store := memory.New() // tests and single-process programs: nothing survives a restart
	// README end
	return readmeTwoPhase(ctx, store)
}

func readmeTwoPhase(ctx context.Context, store idem.Store) error {
	// README: two-phase
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
	// README end
	return err
}

func readmeInbox(ctx context.Context, pgStore *postgres.Store, msg idem.Message, id string, amount int64) error {
	// README: inbox
	g, err := idem.New(pgStore, idem.Options{Scope: "billing"})
	if err != nil {
		return err
	}
	res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		_, err := tx.Exec(ctx, `insert into charges(order_id, amount) values ($1, $2)`, id, amount)
		return nil, err
	})
	// README end
	_ = res
	return err
}

// The snippets that need a server only compile here (their DSNs are the
// reader's); the rest run.
var _ = []any{readmePostgres, readmeMySQL, readmeRedis, readmeInbox}

var readmeBlock = regexp.MustCompile(`(?s)\n\t// README: ([a-z-]+)\n(.*?)\n\t// README end\n`)

func TestREADMEQuickStart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][][]byte
	for _, f := range []string{"readme_test.go", "readme_brokers_test.go"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, readmeBlock.FindAllSubmatch(src, -1)...)
	}
	if len(blocks) != 13 {
		t.Fatalf("found %d README blocks in readme_test.go and readme_brokers_test.go, want 13", len(blocks))
	}
	for _, b := range blocks {
		var lines []string
		for _, l := range strings.Split(string(b[2]), "\n") {
			lines = append(lines, strings.TrimPrefix(l, "\t"))
		}
		want := "```go\n" + strings.Join(lines, "\n") + "\n```"
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md does not show the %s block as readme_test.go compiles it:\n%s", b[1], want)
		}
	}
}

func TestREADMEQuickStartRuns(t *testing.T) {
	t.Chdir(t.TempDir()) // sqlite.Open("idem.db") creates its file here
	for name, f := range map[string]func(context.Context) error{"sqlite": readmeSQLite, "memory": readmeMemory} {
		if err := f(context.Background()); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The README lists every DSN form and parameter the commands' --help does.
func TestREADMEListsDSNForms(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The forms are the lines indented by two spaces in the first part of
	// dsn.Forms, the parameters those of the part that lists them.
	forms, rest, _ := strings.Cut(dsn.Forms, "Parameters idem reads:")
	params, _, _ := strings.Cut(rest, "\n\n")
	var want []string
	for _, part := range []string{forms, params} {
		for _, line := range strings.Split(part, "\n") {
			if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") {
				want = append(want, strings.Fields(line)[0])
			}
		}
	}
	if len(want) != 17 {
		t.Fatalf("found %d forms and parameters in dsn.Forms, want 17: %q", len(want), want)
	}
	for _, w := range want {
		if !strings.Contains(string(readme), "`"+w+"`") {
			t.Errorf("README.md lacks the DSN form or parameter `%s`", w)
		}
	}
	if !strings.Contains(string(readme), "go install github.com/idemgo/idem/cmd/idem@latest") {
		t.Error("README.md does not say how to install the idem command")
	}
}
