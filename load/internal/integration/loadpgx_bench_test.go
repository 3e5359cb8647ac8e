package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgo/idem/entity/entitypgx"
	"github.com/idemgo/idem/load"
	"github.com/idemgo/idem/load/loadpgx"
	"github.com/idemgo/idem/store/postgres"
)

// benchRows is the size of the benchmark's load; IDEM_LOAD_ROWS overrides
// the 1M default for a quick run.
func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("IDEM_LOAD_ROWS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// span is a range of the benchmark's rows, [lo, hi).
type span struct{ lo, hi int }

var (
	currencies = []string{"EUR", "USD", "GBP"}
	days       = func() []string {
		out := make([]string, 365)
		for i := range out {
			out[i] = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i).Format("2006-01-02")
		}
		return out
	}()
)

// orderRow is row i of the benchmark: an order export line, as a CSV would
// give it. Rows are made as they are loaded, so that the load's heap is a
// streaming load's (a million rows held in memory would make every garbage
// collection scan them, charging the path that allocates more for it).
func orderRow(i int) []string {
	return []string{
		strconv.Itoa(1_000_000 + i),
		"customer-" + strconv.Itoa(i%5000),
		strconv.Itoa(100 + i%99_900),
		currencies[i%3],
		days[i%365],
	}
}

var orderColumns = []string{"order_id", "customer", "amount_cents", "currency", "placed_on"}

const orderSchema = `(order_id bigint PRIMARY KEY, customer text NOT NULL, amount_cents bigint NOT NULL,
	currency text NOT NULL, placed_on date NOT NULL%s)`

// fieldSource is a Source over fields, keyed by the first and
// fingerprinted by all, as load.CSV does: the hashing is part of the load.
func fieldSource(rows span) load.Source {
	i := rows.lo
	return load.SourceFunc(func(context.Context) (load.Row, error) {
		if i == rows.hi {
			return load.Row{}, io.EOF
		}
		f := orderRow(i)
		i++
		vals := make([]any, len(f))
		for c, v := range f {
			vals[c] = v
		}
		return load.Row{N: i - rows.lo, Key: f[0], Fingerprint: load.Hash(f...), Values: vals}, nil
	})
}

// plainInsert is the reference: the same rows, the same batches and
// transactions, the same statement shape (text arrays cast to the columns'
// types), without key claims: no ON CONFLICT, no RETURNING, no fingerprint.
func plainInsert(ctx context.Context, st *entitypgx.Store, table string, rows span, batch int) error {
	q := `INSERT INTO ` + table + ` (order_id, customer, amount_cents, currency, placed_on)
		SELECT u.a::bigint, u.b::text, u.c::bigint, u.d::text, u.e::date FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(a, b, c, d, e)`
	for lo := rows.lo; lo < rows.hi; lo += batch {
		hi := min(lo+batch, rows.hi)
		cols := make([][]pgtype.Text, 5)
		for c := range cols {
			cols[c] = make([]pgtype.Text, hi-lo)
		}
		for j := lo; j < hi; j++ {
			for c, v := range orderRow(j) {
				cols[c][j-lo] = pgtype.Text{String: v, Valid: true}
			}
		}
		err := st.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, q, cols[0], cols[1], cols[2], cols[3], cols[4])
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// valuesInsert is the other common reference: INSERT .. VALUES (..), (..)
// with one parameter per field.
func valuesInsert(ctx context.Context, st *entitypgx.Store, table string, rows span, batch int) error {
	for lo := rows.lo; lo < rows.hi; lo += batch {
		hi := min(lo+batch, rows.hi)
		q := []byte(`INSERT INTO ` + table + ` (order_id, customer, amount_cents, currency, placed_on) VALUES `)
		args := make([]any, 0, 5*(hi-lo))
		for j := lo; j < hi; j++ {
			if j > lo {
				q = append(q, ',')
			}
			n := len(args)
			q = fmt.Appendf(q, "($%d::bigint,$%d,$%d::bigint,$%d,$%d::date)", n+1, n+2, n+3, n+4, n+5)
			for _, v := range orderRow(j) {
				args = append(args, v)
			}
		}
		err := st.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, string(q), args...)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// copyInsert is the fastest way in: COPY of the same rows, without keys.
func copyInsert(ctx context.Context, st *entitypgx.Store, table string, rows span, batch int) error {
	for lo := rows.lo; lo < rows.hi; lo += batch {
		hi := min(lo+batch, rows.hi)
		var buf bytes.Buffer
		for j := lo; j < hi; j++ {
			buf.WriteString(strings.Join(orderRow(j), "\t"))
			buf.WriteByte('\n')
		}
		err := st.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Conn().PgConn().CopyFrom(ctx, &buf, "COPY "+table+" FROM STDIN")
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkLoad1M loads the same rows (1M by default, IDEM_LOAD_ROWS to
// change) with the keyed load (loadpgx.Table: key and fingerprint in the
// row) and with plain inserts of the same rows, same batches (1000 rows, a
// transaction each), each into its own table, and reports rows/s and the
// ratios; then it loads the whole input again with the keyed load (every
// row a duplicate). The kinds take turns chunk by chunk (10 batches), each
// chunk starting with the next kind, so that a machine whose load varies,
// and the work one kind leaves the server (autovacuum of its table, dirty
// buffers), slow them alike; keyed/X is X's time over the keyed load's for
// the whole load, keyed/X-median the median of that ratio over the chunks
// (robust to bursts of other work on a shared machine). Also measured: the
// keyed load through the inbox (load.Marked on store/postgres: a marker row
// per row, then the same plain insert of the new rows).
//
//	go test ./load/internal/integration -run '^$' -bench Load1M -benchtime 1x
func BenchmarkLoad1M(b *testing.B) {
	ctx := context.Background()
	pool, schema := testDB(b)
	st := entitypgx.NewStore(pool)
	n := benchRows()
	const batch = load.DefaultBatchSize
	kinds := []string{"plain", "values", "copy", "keyed"}
	for _, kind := range append(kinds, "inbox") {
		extra := ""
		if kind == "keyed" {
			extra = ", load_fp text"
		}
		if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+"."+kind+" "+fmt.Sprintf(orderSchema, extra)); err != nil {
			b.Fatal(err)
		}
	}
	table := &loadpgx.Table{Name: schema + ".keyed", KeyColumn: "order_id", FingerprintColumn: "load_fp", Columns: orderColumns}
	keyed, err := load.New(st, table, load.Options{Scope: "bench", BatchSize: batch})
	if err != nil {
		b.Fatal(err)
	}
	records, err := postgres.New(pool, postgres.Options{Table: schema + ".idem_records"})
	if err != nil {
		b.Fatal(err)
	}
	if err := records.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	inbox, err := load.New(records, load.Marked(records, func(ctx context.Context, tx pgx.Tx, rows []load.Row) error {
		return insertRows(ctx, tx, schema+".inbox", rows)
	}), load.Options{Scope: "bench", BatchSize: batch})
	if err != nil {
		b.Fatal(err)
	}
	took := map[string]time.Duration{}
	ratios := map[string][]float64{} // per chunk: base's time / keyed's
	const chunk = 10 * batch
	for c, lo := 0, 0; lo < n; c, lo = c+1, lo+chunk {
		part := span{lo, min(lo+chunk, n)}
		tookHere := map[string]time.Duration{}
		for k := range kinds {
			kind := kinds[(c+k)%len(kinds)] // each kind takes every place in turn

			start := time.Now()
			var err error
			switch kind {
			case "plain":
				err = plainInsert(ctx, st, schema+".plain", part, batch)
			case "values":
				err = valuesInsert(ctx, st, schema+".values", part, batch)
			case "copy":
				err = copyInsert(ctx, st, schema+".copy", part, batch)
			case "keyed":
				var sum load.Summary
				sum, err = keyed.Run(ctx, fieldSource(part))
				if err == nil && sum.New != part.hi-part.lo {
					err = fmt.Errorf("%s load: %v", kind, sum)
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			tookHere[kind] = time.Since(start)
			took[kind] += tookHere[kind]
		}
		for _, base := range []string{"plain", "values", "copy"} {
			ratios[base] = append(ratios[base], tookHere[base].Seconds()/tookHere["keyed"].Seconds())
		}
	}
	start := time.Now()
	sum, err := keyed.Run(ctx, fieldSource(span{0, n}))
	if err != nil || sum.Duplicate != n {
		b.Fatalf("reload: %v, %v", sum, err)
	}
	took["reload"] = time.Since(start)
	// The inbox writes twice the rows (and its WAL would slow the others'
	// checkpoints), so it runs on its own, then the plain insert again for
	// its ratio.
	for _, kind := range []string{"inbox", "plain-again"} {
		start = time.Now()
		var err error
		if kind == "inbox" {
			sum, err = inbox.Run(ctx, fieldSource(span{0, n}))
			if err == nil && sum.New != n {
				err = fmt.Errorf("inbox load: %v", sum)
			}
		} else {
			_, err = pool.Exec(ctx, "TRUNCATE "+schema+".plain")
			if err == nil {
				err = plainInsert(ctx, st, schema+".plain", span{0, n}, batch)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		took[kind] = time.Since(start)
	}
	for _, kind := range append(kinds, "reload", "inbox") {
		b.ReportMetric(float64(n)/took[kind].Seconds(), kind+"-rows/s")
	}
	for _, base := range []string{"plain", "values", "copy"} {
		b.ReportMetric(took[base].Seconds()/took["keyed"].Seconds(), "keyed/"+base)
		r := ratios[base]
		slices.Sort(r)
		b.ReportMetric(r[len(r)/2], "keyed/"+base+"-median")
	}
	b.ReportMetric(took["plain-again"].Seconds()/took["inbox"].Seconds(), "inbox/plain")
}

// insertRows is plainInsert's statement for rows of the inbox load.
func insertRows(ctx context.Context, tx pgx.Tx, table string, rows []load.Row) error {
	cols := make([][]pgtype.Text, 5)
	for c := range cols {
		cols[c] = make([]pgtype.Text, len(rows))
		for j, r := range rows {
			cols[c][j] = pgtype.Text{String: r.Values[c].(string), Valid: true}
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+table+` (order_id, customer, amount_cents, currency, placed_on)
		SELECT u.a::bigint, u.b::text, u.c::bigint, u.d::text, u.e::date FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(a, b, c, d, e)`,
		cols[0], cols[1], cols[2], cols[3], cols[4])
	return err
}
