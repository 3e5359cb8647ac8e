package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity/entitypgx"
	"github.com/idemgo/idem/load"
	"github.com/idemgo/idem/load/loadpgx"
)

type fixture struct {
	pool   *pgxpool.Pool
	schema string
	table  *loadpgx.Table
	loader *load.Loader[pgx.Tx]
}

func newFixture(t *testing.T, opts load.Options) *fixture {
	t.Helper()
	pool, schema := testDB(t)
	if _, err := pool.Exec(context.Background(), "CREATE TABLE "+schema+".orders "+fmt.Sprintf(orderSchema, ", load_fp text")); err != nil {
		t.Fatal(err)
	}
	tb := &loadpgx.Table{Name: schema + ".orders", KeyColumn: "order_id", FingerprintColumn: "load_fp", Columns: orderColumns}
	if opts.Scope == "" {
		opts.Scope = "orders-import"
	}
	l, err := load.New(entitypgx.NewStore(pool), tb, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{pool: pool, schema: schema, table: tb, loader: l}
}

func (f *fixture) count(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+f.schema+".orders").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// listSource is a Source over rows of orderColumns, keyed by order_id.
func listSource(rows ...[]string) load.Source {
	i := 0
	return load.SourceFunc(func(context.Context) (load.Row, error) {
		if i == len(rows) {
			return load.Row{}, io.EOF
		}
		f := rows[i]
		i++
		vals := make([]any, len(f))
		for c, v := range f {
			vals[c] = v
		}
		return load.Row{N: i, Key: f[0], Fingerprint: load.Hash(f...), Values: vals}, nil
	})
}

func spanRows(lo, hi int) [][]string {
	var out [][]string
	for i := lo; i < hi; i++ {
		out = append(out, orderRow(i))
	}
	return out
}

// A fresh load goes in (by COPY), a reload writes nothing, and an
// overlapping load with changed rows loads the new ones and reports the
// changed ones, leaving the stored rows as they were.
func TestTableLoad(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, load.Options{BatchSize: 100})
	sum, err := f.loader.Run(ctx, listSource(spanRows(0, 1000)...))
	if err != nil || sum.New != 1000 || f.count(t) != 1000 {
		t.Fatalf("first load: %v, %v", sum, err)
	}
	sum, err = f.loader.Run(ctx, listSource(spanRows(0, 1000)...))
	if err != nil || sum.Duplicate != 1000 || sum.New != 0 || f.count(t) != 1000 {
		t.Fatalf("reload: %v, %v", sum, err)
	}
	rows := spanRows(900, 1100)
	rows[10][2] = "1"         // order 1000910's amount changed
	rows[150][1] = "somebody" // order 1001050 is new: its content is whatever it is
	rows[20][3] = "JPY"       // order 1000920's currency changed
	sum, err = f.loader.Run(ctx, listSource(rows...))
	if !errors.Is(err, idem.ErrConflict) || sum.New != 100 || sum.Duplicate != 98 || sum.Conflict != 2 {
		t.Fatalf("overlap: %v, %v", sum, err)
	}
	if c := sum.Conflicts; c[0].Row != 11 || c[0].Key != "1000910" || c[1].Row != 21 || c[1].Key != "1000920" ||
		c[0].Stored != load.Hash(orderRow(910)...) {
		t.Errorf("conflicts %+v", c)
	}
	var amount int64
	f.pool.QueryRow(ctx, "SELECT amount_cents FROM "+f.schema+".orders WHERE order_id = 1000910").Scan(&amount)
	if want := orderRow(910)[2]; fmt.Sprint(amount) != want || f.count(t) != 1100 {
		t.Errorf("order 1000910 amount %d (want %s kept), %d rows", amount, want, f.count(t))
	}
}

// Values with COPY's special characters, NULLs and other Go types arrive
// as they were sent; a key column outside Columns is filled from Row.Key.
func TestTableValues(t *testing.T) {
	ctx := context.Background()
	pool, schema := testDB(t)
	_, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.notes (load_key text PRIMARY KEY, body text, n int, at timestamptz, ok boolean, fp text)`)
	if err != nil {
		t.Fatal(err)
	}
	tb := &loadpgx.Table{Name: schema + ".notes", KeyColumn: "load_key", FingerprintColumn: "fp", Columns: []string{"body", "n", "at", "ok"}}
	l, err := load.New(entitypgx.NewStore(pool), tb, load.Options{Scope: "notes"})
	if err != nil {
		t.Fatal(err)
	}
	body := "tab\there\nnew line \\ backslash \\N not null\r"
	rows := [][]any{{body, 7, "2030-01-02T03:04:05Z", true}, {nil, int64(-1), nil, false}}
	i := 0
	src := load.SourceFunc(func(context.Context) (load.Row, error) {
		if i == len(rows) {
			return load.Row{}, io.EOF
		}
		i++
		return load.Row{N: i, Key: load.Hash(fmt.Sprint(rows[i-1]...)), Values: rows[i-1]}, nil
	})
	for _, disposable := range []bool{true, false} { // COPY, then INSERT (inside a caller's transaction)
		if _, err := pool.Exec(ctx, "TRUNCATE "+schema+".notes"); err != nil {
			t.Fatal(err)
		}
		i = 0
		var sum load.Summary
		if disposable {
			sum, err = l.Run(ctx, src)
		} else {
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				sum, err = l.RunTx(ctx, tx, src)
				return err
			})
		}
		if err != nil || sum.New != 2 {
			t.Fatalf("disposable %v: %v, %v", disposable, sum, err)
		}
		var (
			got  *string
			n    int
			null bool
		)
		pool.QueryRow(ctx, `SELECT body, n FROM `+schema+`.notes WHERE n = 7`).Scan(&got, &n)
		pool.QueryRow(ctx, `SELECT body IS NULL AND at IS NULL AND fp IS NULL FROM `+schema+`.notes WHERE n = -1`).Scan(&null)
		if got == nil || *got != body || !null {
			t.Errorf("disposable %v: body %q, nulls %v", disposable, derefOr(got), null)
		}
	}
}

func derefOr(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// A load stopped halfway (its context cancelled) keeps its committed
// batches; the rerun writes the rest and nothing twice.
func TestTableResume(t *testing.T) {
	f := newFixture(t, load.Options{BatchSize: 100})
	ctx, cancel := context.WithCancel(context.Background())
	f.loader = mustLoader(t, f, load.Options{BatchSize: 100, Progress: func(p load.Progress) {
		if p.Done >= 300 {
			cancel()
		}
	}})
	sum, err := f.loader.Run(ctx, listSource(spanRows(0, 1000)...))
	if !errors.Is(err, context.Canceled) || sum.New < 300 || sum.New == 1000 {
		t.Fatalf("cancelled load: %v, %v", sum, err)
	}
	done := f.count(t)
	if done != sum.New {
		t.Errorf("%d rows stored, summary says %d", done, sum.New)
	}
	f.loader = mustLoader(t, f, load.Options{BatchSize: 100})
	sum, err = f.loader.Run(context.Background(), listSource(spanRows(0, 1000)...))
	if err != nil || sum.New != 1000-done || sum.Duplicate != done || f.count(t) != 1000 {
		t.Errorf("rerun: %v, %v, %d rows", sum, err, f.count(t))
	}
}

func mustLoader(t *testing.T, f *fixture, opts load.Options) *load.Loader[pgx.Tx] {
	t.Helper()
	opts.Scope = "orders-import"
	l, err := load.New(entitypgx.NewStore(f.pool), f.table, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Loads of overlapping inputs at once neither deadlock nor write a row
// twice: every batch takes its keys in one order.
func TestTableConcurrent(t *testing.T) {
	f := newFixture(t, load.Options{BatchSize: 50})
	var wg sync.WaitGroup
	sums := make([]load.Summary, 4)
	errs := make([]error, 4)
	for i := range sums {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows := spanRows(i*150, i*150+300)
			if i%2 == 1 { // backwards: the loader sorts each batch
				for a, b := 0, len(rows)-1; a < b; a, b = a+1, b-1 {
					rows[a], rows[b] = rows[b], rows[a]
				}
			}
			sums[i], errs[i] = f.loader.Run(context.Background(), listSource(rows...))
		}()
	}
	wg.Wait()
	total := 0
	for i := range sums {
		if errs[i] != nil || sums[i].New+sums[i].Duplicate != 300 {
			t.Errorf("load %d: %v, %v", i, sums[i], errs[i])
		}
		total += sums[i].New
	}
	if n := f.count(t); total != 750 || n != 750 {
		t.Errorf("%d new, %d rows: want 750 once each", total, n)
	}
}

func TestTableErrors(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, load.Options{})
	st := entitypgx.NewStore(f.pool)
	bad := []*loadpgx.Table{
		{Name: "x; DROP TABLE y", KeyColumn: "order_id", Columns: orderColumns},
		{Name: "a.b.c", KeyColumn: "order_id", Columns: orderColumns},
		{Name: f.schema + ".orders", KeyColumn: "order_id"},
		{Name: f.schema + ".orders", KeyColumn: "order_id", Columns: []string{"order_id", "nope"}},
		{Name: f.schema + ".orders", KeyColumn: "order_id", Columns: []string{"order_id", "order_id"}},
		{Name: f.schema + ".orders", KeyColumn: "order_id", FingerprintColumn: "customer", Columns: orderColumns},
	}
	for _, tb := range bad {
		l, err := load.New(st, tb, load.Options{Scope: "s"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Run(ctx, listSource(orderRow(0))); err == nil {
			t.Errorf("table %+v: no error", tb)
		} else if tb.Name != f.schema+".orders" && !errors.Is(err, loadpgx.ErrInvalidTable) {
			t.Errorf("table %q: %v, want ErrInvalidTable", tb.Name, err)
		}
	}
	// A value the column cannot take is the server's data error; nothing
	// of its batch is written.
	row := orderRow(1)
	row[2] = "lots"
	if _, err := f.loader.Run(ctx, listSource(orderRow(0), row)); err == nil || !strings.Contains(err.Error(), "invalid input syntax") || f.count(t) != 0 {
		t.Errorf("bad value: %v, %d rows", err, f.count(t))
	}
	// A key that the column stores in another form ("042" as 42) cannot be
	// told apart when it is inserted with others: refused, not miscounted.
	f.loader.Run(ctx, listSource(orderRow(5)))
	odd := orderRow(6)
	odd[0] = "0" + odd[0]
	_, err := f.loader.Run(ctx, listSource(orderRow(5), odd))
	if !errors.Is(err, loadpgx.ErrKeyForm) {
		t.Errorf("key in another form: %v", err)
	}
	// Values that do not match Columns.
	short := load.SourceFunc(func(context.Context) (load.Row, error) { return load.Row{N: 1, Key: "1", Values: []any{"1"}}, nil })
	if _, err := f.loader.Run(ctx, short); err == nil || !strings.Contains(err.Error(), "1 values for 5 columns") {
		t.Errorf("short row: %v", err)
	}
	weird := load.SourceFunc(func(context.Context) (load.Row, error) {
		return load.Row{N: 1, Key: "1", Values: []any{"1", struct{}{}, "1", "EUR", "2030-01-01"}}, nil
	})
	if _, err := f.loader.Run(ctx, weird); err == nil || !strings.Contains(err.Error(), "cannot send struct {} as text") {
		t.Errorf("unsupported value: %v", err)
	}
}
