package integration_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/mysql"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/sqlite"
)

// cpBackend is one business database holding an idem store, a checkpoint
// table and an effects table with no unique constraint, so that an effect
// applied twice shows as two rows.
type cpBackend struct {
	store idem.Store
	cp    kafka.Checkpoints
	// handler builds a HandleCheckpoint handler that inserts the record's
	// effect row in the transaction, then calls each (when not nil) there.
	handler func(cp kafka.Checkpoints, each func(ctx context.Context, rec *kgo.Record) error) kafka.Handler
	// effects returns the effect rows in the order they were committed.
	effects func(t testing.TB) []applied
	// txHandler builds a HandleTx handler inserting the same effect rows
	// (the transactional inbox, for comparison).
	txHandler func() kafka.Handler
	// rows counts the store's records and the checkpoint rows.
	rows func(t testing.TB) (records, checkpoints int)
}

// applied is one effect row: the record it came from.
type applied struct {
	partition int32
	offset    int64
	id        string
}

// cpBackends are the databases checkpoints run on: SQLite (always),
// PostgreSQL and MariaDB (testenv: skipped when absent, failed under
// IDEM_REQUIRE_SERVICES=1).
var cpBackends = []struct {
	name string
	open func(t testing.TB) *cpBackend
}{
	{"sqlite", openSQLiteBackend},
	{"postgres", openPostgresBackend},
	{"mysql", openMySQLBackend},
}

// eachBackend runs f on every backend, each in a subtest of its own.
func eachBackend(t *testing.T, f func(t *testing.T, b *cpBackend)) {
	for _, bc := range cpBackends {
		t.Run(bc.name, func(t *testing.T) { f(t, bc.open(t)) })
	}
}

func suffix(t testing.TB) string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// openSQLite returns a migrated SQLite store in a file of the test's own.
func openSQLite(t testing.TB) *sqlite.Store {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "business.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

func openSQLiteBackend(t testing.TB) *cpBackend {
	st := openSQLite(t)
	return sqlBackend(t, st, st.DB(), "checkpoints",
		`CREATE TABLE effects (seq INTEGER PRIMARY KEY AUTOINCREMENT, partition_id INTEGER NOT NULL, off INTEGER NOT NULL, id TEXT NOT NULL)`)
}

func openMySQLBackend(t testing.TB) *cpBackend {
	cfg, err := gomysql.ParseDSN(testenv.MySQL.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	dbName := "idem_cp_" + suffix(t)
	if _, err := admin.Exec("CREATE DATABASE `" + dbName + "`"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE `" + dbName + "`"); err != nil {
			t.Errorf("drop database %s: %v", dbName, err)
		}
	})
	cfg.DBName = dbName
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st, err := mysql.New(db, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return sqlBackend(t, st, db, "checkpoints",
		"CREATE TABLE effects (seq BIGINT AUTO_INCREMENT PRIMARY KEY, partition_id INT NOT NULL, off BIGINT NOT NULL, id VARCHAR(200) NOT NULL) ENGINE = InnoDB")
}

// sqlBackend is the *sql.Tx backend over db, whose store is st.
func sqlBackend(t testing.TB, st idem.Store, db *sql.DB, table, effectsDDL string) *cpBackend {
	ctx := context.Background()
	insert := func(ctx context.Context, tx *sql.Tx, rec *kgo.Record) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (partition_id, off, id) VALUES (?, ?, ?)`,
			rec.Partition, rec.Offset, idOf(rec))
		return err
	}
	cp := kafka.Checkpoints{Table: table}
	if err := cp.Migrate(ctx, st); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, effectsDDL); err != nil {
		t.Fatal(err)
	}
	return &cpBackend{
		store: st,
		cp:    cp,
		handler: func(cp kafka.Checkpoints, each func(context.Context, *kgo.Record) error) kafka.Handler {
			return effectHandler(cp, each, insert)
		},
		txHandler: func() kafka.Handler { return txEffectHandler(insert) },
		rows: func(t testing.TB) (int, int) {
			return count(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM idem_records`)),
				count(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table))
		},
		effects: func(t testing.TB) []applied {
			t.Helper()
			rows, err := db.QueryContext(context.Background(), `SELECT partition_id, off, id FROM effects ORDER BY seq`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out []applied
			for rows.Next() {
				var a applied
				if err := rows.Scan(&a.partition, &a.offset, &a.id); err != nil {
					t.Fatal(err)
				}
				out = append(out, a)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		},
	}
}

func openPostgresBackend(t testing.TB) *cpBackend {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.Postgres.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := "idem_cp_" + suffix(t)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	st, err := postgres.New(pool, postgres.Options{Table: schema + ".idem_records"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cp := kafka.Checkpoints{Table: schema + ".checkpoints"}
	if err := cp.Migrate(ctx, st); err != nil {
		t.Fatal(err)
	}
	effects := schema + ".effects"
	if _, err := pool.Exec(ctx, `CREATE TABLE `+effects+` (seq bigserial PRIMARY KEY, partition_id int NOT NULL, off bigint NOT NULL, id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	insert := func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` (partition_id, off, id) VALUES ($1, $2, $3)`,
			rec.Partition, rec.Offset, idOf(rec))
		return err
	}
	return &cpBackend{
		store: st,
		cp:    cp,
		handler: func(cp kafka.Checkpoints, each func(context.Context, *kgo.Record) error) kafka.Handler {
			return effectHandler(cp, each, insert)
		},
		txHandler: func() kafka.Handler { return txEffectHandler(insert) },
		rows: func(t testing.TB) (int, int) {
			return count(t, pool.QueryRow(ctx, `SELECT COUNT(*) FROM `+schema+`.idem_records`)),
				count(t, pool.QueryRow(ctx, `SELECT COUNT(*) FROM `+schema+`.checkpoints`))
		},
		effects: func(t testing.TB) []applied {
			t.Helper()
			rows, err := pool.Query(context.Background(), `SELECT partition_id, off, id FROM `+effects+` ORDER BY seq`)
			if err != nil {
				t.Fatal(err)
			}
			out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (applied, error) {
				var a applied
				err := r.Scan(&a.partition, &a.offset, &a.id)
				return a, err
			})
			if err != nil {
				t.Fatal(err)
			}
			return out
		},
	}
}

// effectHandler is the backends' handler: insert the record's effect row
// in tx, then run each (when not nil) there.
func effectHandler[Tx any](cp kafka.Checkpoints, each func(context.Context, *kgo.Record) error,
	insert func(ctx context.Context, tx Tx, rec *kgo.Record) error) kafka.Handler {
	return kafka.HandleCheckpoint(cp, func(ctx context.Context, tx Tx, rec *kgo.Record) error {
		if err := insert(ctx, tx, rec); err != nil || each == nil {
			return err
		}
		return each(ctx, rec)
	})
}

// txEffectHandler is HandleTx over the same insert.
func txEffectHandler[Tx any](insert func(ctx context.Context, tx Tx, rec *kgo.Record) error) kafka.Handler {
	return kafka.HandleTx(func(ctx context.Context, tx Tx, rec *kgo.Record) ([]byte, error) {
		return nil, insert(ctx, tx, rec)
	})
}

// count scans a COUNT(*).
func count(t testing.TB, row interface{ Scan(...any) error }) int {
	t.Helper()
	var n int
	if err := row.Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkOnce asserts that the effects are exactly one row per record of
// want (partition and offset, as produced), none other, and that each
// partition's effects were committed in offset order.
func checkOnce(t *testing.T, got []applied, want []*kgo.Record) {
	t.Helper()
	type po struct {
		p int32
		o int64
	}
	n := make(map[po]int)
	last := make(map[int32]int64)
	for _, a := range got {
		n[po{a.partition, a.offset}]++
		if o, ok := last[a.partition]; ok && a.offset <= o {
			t.Errorf("partition %d: offset %d applied after %d", a.partition, a.offset, o)
		}
		last[a.partition] = a.offset
	}
	for _, r := range want {
		if c := n[po{r.Partition, r.Offset}]; c != 1 {
			t.Errorf("%d/%d (%s): %d effects, want 1", r.Partition, r.Offset, idOf(r), c)
		}
		delete(n, po{r.Partition, r.Offset})
	}
	for k, c := range n {
		t.Errorf("%d/%d: %d effects of a record never produced", k.p, k.o, c)
	}
}

// records returns n records per partition with ids tag-p-seq.
func records(topic, tag string, parts int32, n int) []*kgo.Record {
	var out []*kgo.Record
	for seq := range n {
		for p := range parts {
			r := kafka.Record(topic, "", fmt.Sprintf("%s-p%d-%d", tag, p, seq), payload(p, seq))
			r.Partition = p
			out = append(out, r)
		}
	}
	return out
}

// settled counts a consumer's settled reports by outcome and action.
type settled struct {
	mu  sync.Mutex
	by  map[idem.Outcome]int
	dls int
}

func (o *settled) hooks() broker.Hooks[*kgo.Record] {
	return broker.Hooks[*kgo.Record]{AfterSettle: func(_ context.Context, _ *kgo.Record, r broker.Report) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.by == nil {
			o.by = make(map[idem.Outcome]int)
		}
		if r.Action == idem.ActionDeadLetter && r.BrokerErr == nil {
			o.dls++
		}
		if r.Action != idem.ActionRetry {
			o.by[r.Result.Outcome]++
		}
	}}
}

func (o *settled) count(out idem.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.by[out]
}

// cpConsumer is a consumer whose client can crash: Kill cuts its
// connections, so nothing more reaches the broker (no offset commit, no
// leave); the database stays reachable, as for a process that lost the
// network to Kafka only.
type cpConsumer struct {
	*running
	conns *connKill
}

// startCP starts a consumer of e's topic in group (e.group when empty)
// with a 1s session, so that a killed member leaves the group soon.
func startCP(t *testing.T, e *env, group string, g *idem.Guard, h kafka.Handler, opts kafka.Options) *cpConsumer {
	t.Helper()
	if group == "" {
		group = e.group
	}
	conns := &connKill{}
	cl := e.consumerClient(kgo.ConsumerGroup(group), kgo.SessionTimeout(time.Second), kgo.Dialer(conns.dial))
	if opts.DeadLetterTopic == "" {
		opts.DeadLetterTopic = e.dlq
	}
	if opts.Backoff == nil {
		opts.Backoff = idem.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)
	}
	if opts.CommitInterval == 0 {
		opts.CommitInterval = 20 * time.Millisecond
	}
	if opts.Hooks.OnError == nil {
		opts.Hooks.OnError = func(err error) { t.Logf("consumer error: %v", err) }
	}
	cc := &cpConsumer{running: runOn(t, cl, g, h, opts), conns: conns}
	t.Cleanup(func() { cc.stop(func(error) bool { return true }) })
	return cc
}

// kill crashes the consumer: its connections are cut, then Run is ended
// (its final commit cannot reach the broker) and the client closed without
// a leave.
func (c *cpConsumer) kill() {
	if c.cancel == nil {
		return
	}
	c.conns.kill()
	c.cancel()
	c.cancel = nil
	<-c.done
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	c.cl.LeaveGroupContext(gone)
	c.cl.Close()
}

func newCPGuard(t testing.TB, st idem.Store, scope string) *idem.Guard {
	t.Helper()
	g, err := idem.New(st, idem.Options{Scope: scope, Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// waitPositions waits until the stored positions of scope are the end
// offsets of every partition of e's topic.
func waitPositions(t *testing.T, e *env, b *cpBackend, scope string) {
	t.Helper()
	ends := e.endOffsets()
	eventually(t, fmt.Sprintf("checkpoints at the end offsets %v", ends), func() bool {
		pos, err := b.cp.Positions(context.Background(), b.store, scope, e.topic)
		if err != nil {
			t.Fatal(err)
		}
		for p, end := range ends {
			if pos[p] != end {
				return false
			}
		}
		return true
	})
}

// waitEffects waits until at least n effects are committed.
func waitEffects(t *testing.T, b *cpBackend, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d effects", n), func() bool { return len(b.effects(t)) >= n })
}
