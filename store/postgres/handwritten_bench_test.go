package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/postgres"
)

// handStream is the length of BenchmarkInboxVsHandWritten's stream (a
// multiple of handChunk): the messages each side processes per op,
// handChunk at a time, every side in turn.
var handStream = flag.Int("handmsgs", 20_000, "messages a side per op of BenchmarkInboxVsHandWritten (a multiple of 1000)")

const handChunk = 1_000

// redelivered returns the stream position whose message position p
// delivers again, or -1 when p is a first delivery. With pct (a multiple of
// 10: 0, 10 or 50 here) percent of redeliveries, they are spread evenly: the
// last pct/10 positions of every ten. Each one redelivers a first delivery
// about 450 positions back (a chunk of 1000 earlier or the same one,
// committed long before with 8 workers), and a few positions back at the
// head of the stream.
func redelivered(p, pct int) int {
	if pct == 0 || p%10 < 10-pct/10 {
		return -1
	}
	back := 455
	if p < back {
		back = 5
	}
	for q := p - back; ; q-- {
		if redelivered(q, pct) < 0 {
			return q
		}
	}
}

// BenchmarkInboxVsHandWritten measures idem's transactional inbox against
// the inbox a user writes by hand with pgx, side by side: one pool of 8
// connections and 8 goroutines, a stream of 20,000 messages a side per op
// (b.N ops), each new message one business row, with 0%, 10% or 50% of
// the messages redeliveries of earlier ones spread evenly over the stream
// (50%: a queue redelivering half of what it delivers). The
// sides run the stream 1000 messages at a time in turn, in alternating
// order, so that the machine's load hits them alike:
//
//   - hand: pgx.BeginFunc; INSERT INTO inbox (id) .. ON CONFLICT DO NOTHING;
//     when it inserted, the business insert; COMMIT (inbox is one text
//     column, its primary key);
//   - handrow: hand's transaction, with the row idem's marker writes (a
//     records table: its twelve columns, its primary key on (scope, id)
//     and its sweep index) as the inbox, filled by hand: the payload's
//     SHA-256 in hex, a random token, the times; what remains between
//     default and handrow is idem's code, not its record;
//   - default: idem.DoTx with the same business insert, default options;
//   - first: the same with Options.MarkWithFirstStatement;
//   - nodedup: BEGIN, the business insert, COMMIT, for every message (the
//     insert's ON CONFLICT DO NOTHING keeps redeliveries' rows out).
//
// Every side's business insert is INSERT .. ON CONFLICT DO NOTHING into a
// table of its own. After each op every side's business table must hold
// one row per distinct message. Metrics: messages per second, the client's
// CPU time per message (getrusage; the server's is not separable from other
// sessions'), and the ratios default/hand, first/hand, default/nodedup,
// first/nodedup and default/handrow.
func BenchmarkInboxVsHandWritten(b *testing.B) {
	for _, pct := range []int{0, 10, 50} {
		b.Run(fmt.Sprintf("redeliveries=%d%%", pct), func(b *testing.B) { benchHandWritten(b, pct) })
	}
}

func benchHandWritten(b *testing.B, pct int) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.Postgres.Need(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = benchWorkers, benchWorkers
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	schema := newSchema(b, testPool(b)) // letters, digits and underscores
	newStore := func(name string, opts postgres.Options) (*idem.Guard, string) {
		opts.Table = schema + "." + name
		s, err := postgres.New(pool, opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		g, err := idem.New(s, idem.Options{Scope: "billing"})
		if err != nil {
			b.Fatal(err)
		}
		return g, name
	}
	charges := func(name string) string {
		if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.`+name+` (order_id text PRIMARY KEY, amount int NOT NULL)`); err != nil {
			b.Fatal(err)
		}
		return `INSERT INTO ` + schema + `.` + name + ` (order_id, amount) VALUES ($1, 5) ON CONFLICT DO NOTHING`
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.inbox (id text PRIMARY KEY)`); err != nil {
		b.Fatal(err)
	}
	markHand := `INSERT INTO ` + schema + `.inbox (id) VALUES ($1) ON CONFLICT DO NOTHING`
	doTx := func(g *idem.Guard, insert string) func(ctx context.Context, id string) error {
		return func(ctx context.Context, id string) error {
			_, err := idem.DoTx(ctx, g, idem.Message{ID: id, Payload: []byte(id)}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				_, err := tx.Exec(ctx, insert, id)
				return nil, err
			})
			return err
		}
	}
	type side struct {
		name    string
		charges string
		op      func(ctx context.Context, id string) error
		took    time.Duration
		cpu     time.Duration // the client's
		server  time.Duration // the pool's backends'
	}
	gDefault, _ := newStore("idem_default", postgres.Options{})
	// handrow's inbox is a records table (made by a store's Migrate), into
	// which the hand-written side inserts the row idem's marker inserts.
	newStore("idem_handrow", postgres.Options{})
	markRow := `INSERT INTO ` + schema + `.idem_handrow (scope, id, display_id, state, fingerprint, token, attempts,
		lease_until, expires_at, sweep_at, created_at, updated_at)
		VALUES ('billing', $1, NULL, 2, $2, $3, 1, $4, $5, $6, $4, $4) ON CONFLICT (scope, id) DO NOTHING`
	gFirst, _ := newStore("idem_first", postgres.Options{MarkWithFirstStatement: true})
	insHand, insDefault, insFirst, insNo := charges("charges_hand"), charges("charges_default"), charges("charges_first"), charges("charges_nodedup")
	insHandRow := charges("charges_handrow")
	// handInbox is the hand-written inbox: pgx.BeginFunc; the marker
	// statement mark with markArgs(id); when it inserted, the business
	// insert; COMMIT.
	handInbox := func(mark string, markArgs func(id string) []any, insert string) func(ctx context.Context, id string) error {
		return func(ctx context.Context, id string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, mark, markArgs(id)...)
				if err != nil || tag.RowsAffected() == 0 {
					return err
				}
				_, err = tx.Exec(ctx, insert, id)
				return err
			})
		}
	}
	sides := []*side{
		{name: "hand", charges: "charges_hand", op: handInbox(markHand, func(id string) []any { return []any{id} }, insHand)},
		{name: "handrow", charges: "charges_handrow", op: handInbox(markRow, func(id string) []any {
			sum := sha256.Sum256([]byte(id))
			now := time.Now()
			exp := now.Add(7 * 24 * time.Hour)
			return []any{id, hex.EncodeToString(sum[:]), rand.Int64(), now, exp, exp.Truncate(time.Second)}
		}, insHandRow)},
		{name: "default", charges: "charges_default", op: doTx(gDefault, insDefault)},
		{name: "first", charges: "charges_first", op: doTx(gFirst, insFirst)},
		{name: "nodedup", charges: "charges_nodedup", op: func(ctx context.Context, id string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, insNo, id)
				return err
			})
		}},
	}
	// id is the message id at stream position p of op r (warm-up: -1).
	id := func(r, p int) string {
		if q := redelivered(p, pct); q >= 0 {
			p = q
		}
		return fmt.Sprintf("m%d-%d", r, p)
	}
	run := func(s *side, r, from, n int) time.Duration {
		return runRange(b, int64(from), n, func(ctx context.Context, p int64) error { return s.op(ctx, id(r, int(p))) })
	}
	distinct := 0
	for p := range *handStream {
		if redelivered(p, pct) < 0 {
			distinct++
		}
	}
	for _, s := range sides { // warm the connections and statement caches
		run(s, -1, 0, 4*benchWorkers)
	}
	server := backends(b, pool)
	b.ResetTimer()
	for r := range b.N {
		for c := range *handStream / handChunk {
			for j := range sides {
				s := sides[j]
				if c%2 == 1 {
					s = sides[len(sides)-1-j]
				}
				cpu, _ := testenv.ProcessCPU()
				scpu := server()
				s.took += run(s, r, c*handChunk, handChunk)
				after, _ := testenv.ProcessCPU()
				s.cpu += after - cpu
				s.server += server() - scpu
			}
		}
		b.StopTimer()
		for _, s := range sides {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.`+s.charges+` WHERE order_id LIKE $1`,
				fmt.Sprintf("m%d-%%", r)).Scan(&n); err != nil {
				b.Fatal(err)
			}
			if n != distinct {
				b.Fatalf("%s: %d business rows for %d distinct messages", s.name, n, distinct)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	msgs := float64(b.N * *handStream)
	rate := map[string]float64{}
	for _, s := range sides {
		rate[s.name] = msgs / s.took.Seconds()
		b.ReportMetric(rate[s.name], s.name+"/s")
		b.ReportMetric(float64(s.cpu.Microseconds())/msgs, s.name+"-cpu-µs/msg")
		b.ReportMetric(float64(s.server.Microseconds())/msgs, s.name+"-server-µs/msg")
	}
	b.ReportMetric(rate["default"]/rate["hand"], "default/hand")
	b.ReportMetric(rate["first"]/rate["hand"], "first/hand")
	b.ReportMetric(rate["default"]/rate["nodedup"], "default/nodedup")
	b.ReportMetric(rate["first"]/rate["nodedup"], "first/nodedup")
	b.ReportMetric(rate["default"]/rate["handrow"], "default/handrow")
	b.ReportMetric(0, "ns/op")
}

// backends returns a function that reads the CPU time the server processes
// behind pool's connections have used (the first field of
// /proc/PID/schedstat, in nanoseconds), or 0 when it cannot: a local server
// on Linux. Every connection of the pool must be open and idle.
func backends(b *testing.B, pool *pgxpool.Pool) func() time.Duration {
	ctx := context.Background()
	conns := make([]*pgxpool.Conn, 0, pool.Config().MaxConns)
	for range cap(conns) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	pids := make([]uint32, len(conns))
	for i, c := range conns {
		pids[i] = c.Conn().PgConn().PID()
		c.Release()
	}
	return func() time.Duration {
		var sum time.Duration
		for _, pid := range pids {
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
			if err != nil {
				return 0
			}
			f := strings.Fields(string(raw))
			if len(f) == 0 {
				return 0
			}
			ns, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0
			}
			sum += time.Duration(ns)
		}
		return sum
	}
}
