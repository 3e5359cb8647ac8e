package load_test

import (
	"context"
	"errors"
	"fmt"

	"os/exec"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/load"
)

func newLoader(t *testing.T, tb *table, opts load.Options) *load.Loader[*tx] {
	t.Helper()
	if opts.Scope == "" {
		opts.Scope = "orders-import"
	}
	l, err := load.New[*tx](tb, tb, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestOptions(t *testing.T) {
	tb := newTable()
	for _, opts := range []load.Options{{}, {Scope: "a\x00"}, {Scope: "s", BatchSize: -1}, {Scope: "s", Retention: -1}} {
		if _, err := load.New[*tx](tb, tb, opts); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("New(%+v): %v", opts, err)
		}
	}
	if _, err := load.New[*tx](nil, tb, load.Options{Scope: "s"}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("nil transactor: %v", err)
	}
}

// Loading the same input again writes nothing; an overlapping input with
// changed rows reports each changed row, by number, and loads the rest.
func TestReloadAndOverlap(t *testing.T) {
	ctx := context.Background()
	tb := newTable()
	var progress []load.Progress
	l := newLoader(t, tb, load.Options{BatchSize: 2, Total: 5, Progress: func(p load.Progress) { progress = append(progress, p) }})
	first := []string{"o1=a", "o2=b", "o3=c", "o4=d", "o5=e"}
	sum, err := l.Run(ctx, rowsOf(first...))
	if err != nil || sum.Rows != 5 || sum.New != 5 || sum.Duplicate != 0 || sum.Conflict != 0 {
		t.Fatalf("first load: %v, %v", sum, err)
	}
	if len(progress) != 4 || progress[3].Done != 5 || !progress[3].Finished || progress[0].Done != 2 || progress[0].Total != 5 || progress[2].Finished {
		t.Errorf("progress %+v: want one report per batch and a finished one", progress)
	}
	sum, err = l.Run(ctx, rowsOf(first...))
	if err != nil || sum.New != 0 || sum.Duplicate != 5 {
		t.Errorf("reload: %v, %v", sum, err)
	}
	var seen []load.Conflict
	l = newLoader(t, tb, load.Options{BatchSize: 2, OnConflict: func(c load.Conflict) { seen = append(seen, c) }})
	sum, err = l.Run(ctx, rowsOf("o4=d", "o5=E", "o6=f", "o2=B", "o7=g"))
	var ce *load.ConflictError
	if !errors.Is(err, idem.ErrConflict) || !errors.As(err, &ce) || ce.Count != 2 {
		t.Fatalf("overlap: %v, want a ConflictError of 2", err)
	}
	if sum.Rows != 5 || sum.New != 2 || sum.Duplicate != 1 || sum.Conflict != 2 || len(sum.Conflicts) != 2 {
		t.Errorf("overlap: %v", sum)
	}
	c := sum.Conflicts
	if c[0].Row != 2 || c[0].Line != 3 || c[0].Key != "o5" || c[0].Stored != load.Hash("e") || c[0].Fingerprint != load.Hash("E") ||
		c[1].Row != 4 || c[1].Key != "o2" || c[1].Earlier != 0 {
		t.Errorf("conflicts %+v", c)
	}
	if fmt.Sprint(seen) != fmt.Sprint(c) {
		t.Errorf("OnConflict saw %v, want %v", seen, c)
	}
	if tb.rows["o5"] != load.Hash("e") || tb.rows["o2"] != load.Hash("b") || tb.writes != 7 {
		t.Errorf("stored o5=%.8s o2=%.8s, %d writes: conflicts must leave the stored rows, every row written once",
			tb.rows["o5"], tb.rows["o2"], tb.writes)
	}
	if !strings.Contains(err.Error(), "row 2 (line 3): key o5 exists with other content") {
		t.Errorf("error %q does not name the first conflict", err)
	}
}

// A key repeated in one input: the first row is loaded, an identical repeat
// is a duplicate, a different one a conflict naming the first.
func TestRepeatsInInput(t *testing.T) {
	for _, batch := range []int{100, 1} {
		t.Run(fmt.Sprint("batch ", batch), func(t *testing.T) {
			tb := newTable()
			l := newLoader(t, tb, load.Options{BatchSize: batch})
			sum, err := l.Run(context.Background(), rowsOf("k=a", "j=x", "k=a", "k=b", "j=x"))
			if !errors.Is(err, idem.ErrConflict) || sum.New != 2 || sum.Duplicate != 2 || sum.Conflict != 1 {
				t.Fatalf("%v, %v", sum, err)
			}
			c := sum.Conflicts[0]
			earlier := 1
			if batch == 1 {
				earlier = 0 // stored by an earlier batch: the loader does not track rows across batches
			}
			if c.Row != 4 || c.Key != "k" || c.Earlier != earlier || c.Stored != load.Hash("a") {
				t.Errorf("conflict %+v", c)
			}
			if tb.writes != 2 {
				t.Errorf("%d writes, want 2", tb.writes)
			}
		})
	}
}

// A load that stops keeps what it committed; its rerun skips that and
// finishes.
func TestStoppedLoadResumes(t *testing.T) {
	ctx := context.Background()
	tb := newTable()
	tb.failAt = 5
	l := newLoader(t, tb, load.Options{BatchSize: 2})
	input := []string{"a=1", "b=2", "c=3", "d=4", "e=5", "f=6"}
	sum, err := l.Run(ctx, rowsOf(input...))
	if !errors.Is(err, errFail) || sum.Rows != 4 || sum.New != 4 {
		t.Fatalf("failing load: %v, %v", sum, err)
	}
	tb.failAt = 0
	sum, err = l.Run(ctx, rowsOf(input...))
	if err != nil || sum.New != 2 || sum.Duplicate != 4 || tb.writes != 6 {
		t.Errorf("rerun: %v, %v, %d writes", sum, err, tb.writes)
	}
}

// Rows without a usable key stop the load before their batch's transaction.
func TestRowErrors(t *testing.T) {
	tb := newTable()
	l := newLoader(t, tb, load.Options{BatchSize: 2})
	sum, err := l.Run(context.Background(), rowsOf("a=1", "b=2", "c=3", " =4"))
	var re *load.RowError
	if !errors.As(err, &re) || re.Row != 4 || re.Line != 5 || !errors.Is(err, idem.ErrNoKey) {
		t.Fatalf("empty key: %v", err)
	}
	if sum.New != 2 || tb.commits != 1 {
		t.Errorf("%v, %d commits: the first batch is loaded, the bad one not", sum, tb.commits)
	}
	if _, err := l.Run(context.Background(), rowsOf("bad\xff=1")); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("invalid key: %v", err)
	}
}

func TestSourceError(t *testing.T) {
	tb := newTable()
	l := newLoader(t, tb, load.Options{BatchSize: 2})
	boom := errors.New("disk gone")
	n := 0
	sum, err := l.Run(context.Background(), load.SourceFunc(func(context.Context) (load.Row, error) {
		n++
		if n == 4 {
			return load.Row{}, boom
		}
		return load.Row{N: n, Key: fmt.Sprint(n)}, nil
	}))
	if !errors.Is(err, boom) || sum.New != 3 {
		t.Errorf("%v, %v: rows read before the error are loaded, then the error", sum, err)
	}
}

// A writer's cheap first try may abort its own transaction: the batch runs
// again without it. Inside the caller's transaction there is no first try.
func TestRetryBatch(t *testing.T) {
	ctx := context.Background()
	tb := newTable()
	tb.retryFirst = true
	l := newLoader(t, tb, load.Options{BatchSize: 10})
	if _, err := l.Run(ctx, rowsOf("a=1", "b=2")); err != nil {
		t.Fatal(err)
	}
	sum, err := l.Run(ctx, rowsOf("a=1", "c=3"))
	if err != nil || sum.New != 1 || sum.Duplicate != 1 {
		t.Fatalf("%v, %v", sum, err)
	}
	if fmt.Sprint(tb.tries) != "[true true false]" {
		t.Errorf("tries %v: the fresh batch goes in at once, the one with a stored key is tried twice", tb.tries)
	}
	tb.tries = nil
	err = tb.InTx(ctx, func(ctx context.Context, x *tx) error {
		sum, err = l.RunTx(ctx, x, rowsOf("a=1", "d=4", "e=5"))
		return err
	})
	if err != nil || sum.New != 2 || sum.Duplicate != 1 || fmt.Sprint(tb.tries) != "[false]" {
		t.Errorf("RunTx: %v, %v, tries %v", sum, err, tb.tries)
	}
}

// RunTx writes every batch in the caller's transaction: nothing is stored
// until it commits, and a rollback leaves nothing.
func TestRunTx(t *testing.T) {
	ctx := context.Background()
	tb := newTable()
	l := newLoader(t, tb, load.Options{BatchSize: 2})
	rollback := errors.New("caller rolls back")
	err := tb.InTx(ctx, func(ctx context.Context, x *tx) error {
		sum, err := l.RunTx(ctx, x, rowsOf("a=1", "b=2", "c=3", "a=1"))
		if err != nil || sum.New != 3 || sum.Duplicate != 1 {
			t.Errorf("RunTx: %v, %v", sum, err)
		}
		if len(tb.rows) != 0 {
			t.Error("rows stored before the caller's commit")
		}
		return rollback
	})
	if !errors.Is(err, rollback) || len(tb.rows) != 0 {
		t.Errorf("after rollback: %v, %d rows", err, len(tb.rows))
	}
}

func TestStateErrors(t *testing.T) {
	for _, outcome := range []idem.ClaimOutcome{idem.ClaimInProgress, idem.ClaimStale} {
		w := load.WriterFunc[*tx](func(ctx context.Context, x *tx, b *load.Batch) ([]idem.Claim, error) {
			return []idem.Claim{{Outcome: outcome}}, nil
		})
		l, err := load.New[*tx](newTable(), w, load.Options{Scope: "s"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Run(context.Background(), rowsOf("a=1"))
		var se *idem.StateError
		if !errors.As(err, &se) || se.Key != (idem.Key{Scope: "s", ID: "a"}) {
			t.Errorf("%v: %v, want a StateError for the key", outcome, err)
		}
	}
	// A writer that answers for the wrong number of rows is an error, not
	// a guess.
	w := load.WriterFunc[*tx](func(context.Context, *tx, *load.Batch) ([]idem.Claim, error) { return nil, nil })
	l, _ := load.New[*tx](newTable(), w, load.Options{Scope: "s"})
	if _, err := l.Run(context.Background(), rowsOf("a=1")); err == nil {
		t.Error("no claims for a row: no error")
	}
}

func TestMaxConflicts(t *testing.T) {
	tb := newTable()
	l := newLoader(t, tb, load.Options{MaxConflicts: 2})
	l.Run(context.Background(), rowsOf("a=1", "b=1", "c=1"))
	sum, err := l.Run(context.Background(), rowsOf("a=2", "b=2", "c=2"))
	var ce *load.ConflictError
	if !errors.As(err, &ce) || ce.Count != 3 || len(ce.Conflicts) != 2 || sum.Conflict != 3 || len(sum.Conflicts) != 2 {
		t.Errorf("%v, %v", sum, err)
	}
	l = newLoader(t, tb, load.Options{MaxConflicts: -1})
	if sum, _ := l.Run(context.Background(), rowsOf("a=3")); sum.Conflict != 1 || len(sum.Conflicts) != 0 {
		t.Errorf("MaxConflicts < 0: %v", sum)
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tb := newTable()
	l := newLoader(t, tb, load.Options{BatchSize: 1})
	n := 0
	_, err := l.Run(ctx, load.SourceFunc(func(ctx context.Context) (load.Row, error) {
		n++
		if n == 3 {
			cancel()
		}
		if err := ctx.Err(); err != nil {
			return load.Row{}, err
		}
		return load.Row{N: n, Key: fmt.Sprint(n)}, nil
	}))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled load: %v", err)
	}
}

func TestReports(t *testing.T) {
	p := load.Progress{Done: 120, Total: 1000, New: 118, Conflict: 2, Elapsed: 2e9}
	if got := p.String(); got != "120/1000 rows (12.0%), 60 rows/s: 118 new, 0 duplicate, 2 conflict" {
		t.Errorf("progress %q", got)
	}
	if got := (load.Progress{Done: 5}).String(); got != "5 rows, 0 rows/s: 0 new, 0 duplicate, 0 conflict" {
		t.Errorf("progress without total or time %q", got)
	}
	var b strings.Builder
	term := load.Terminal(&b)
	term(load.Progress{Done: 1})
	term(load.Progress{Done: 2}) // within a tenth of a second: skipped
	term(load.Progress{Done: 3, Finished: true})
	if got := b.String(); got != "\r\x1b[K1 rows, 0 rows/s: 0 new, 0 duplicate, 0 conflict\r\x1b[K3 rows, 0 rows/s: 0 new, 0 duplicate, 0 conflict\n" {
		t.Errorf("terminal %q", got)
	}
	c := load.Conflict{Row: 7, Line: 8, Key: "42", Stored: "aaaaaaaaaaaaaaaa", Fingerprint: "bbbbbbbbbbbbbbbb"}
	if got := c.String(); got != "row 7 (line 8): key 42 exists with other content (stored aaaaaaaaaaaa, row bbbbbbbbbbbb)" {
		t.Errorf("conflict %q", got)
	}
	if got := (load.Conflict{Row: 9, Key: "42", Earlier: 3}).String(); got != "row 9: key 42 was loaded from row 3 with other content" {
		t.Errorf("conflict %q", got)
	}
	if got := (load.Summary{Rows: 3, New: 1, Duplicate: 1, Conflict: 1, Elapsed: 1234567890}).String(); got != "3 rows in 1.235s: 1 new, 1 duplicate, 1 conflict" {
		t.Errorf("summary %q", got)
	}
}

func TestHashAndJoinKey(t *testing.T) {
	if load.Hash("ab", "c") != idem.Fingerprint([]byte("ab"), []byte("c")) || load.Hash("ab", "c") == load.Hash("a", "bc") {
		t.Error("Hash is not idem.Fingerprint of the fields")
	}
	long := strings.Repeat("x", 1000)
	if load.Hash(long) != idem.Fingerprint([]byte(long)) {
		t.Error("Hash of a long field")
	}
	if load.JoinKey("a|b", "c") == load.JoinKey("a", "b|c") || load.JoinKey("t", "42") != "t|42" || load.JoinKey("x|y") != "x|y" {
		t.Error("JoinKey")
	}
}

// The package imports the standard library and idem only (the root
// module's packages: idem, and storekit for the stored form of a
// fingerprint).
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		// The root module's internal packages come with idem itself.
		if p != "github.com/idemgo/idem" && p != "github.com/idemgo/idem/load" && p != "github.com/idemgo/idem/store/storekit" &&
			!strings.HasPrefix(p, "github.com/idemgo/idem/internal/") {
			t.Errorf("load imports %s", p)
		}
	}
}
