package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storetest"
)

// Without MarkWithFirstStatement a new key's marker goes with BEGIN, the
// insert alone. A redelivery the store marked lately is settled by a read of
// its record before the transaction begins: one round trip, no transaction.
// One it did not mark (after a restart: a new store) costs the insert, the
// read and the rollback. A key the store marked in a transaction that then
// rolled back is forgotten: its retry is marked as a new key's. One whose
// record is gone is read, found missing, and marked by the claim statement.
// A key reused with other content is a conflict, from the read alone.
func TestMarkRoundTrips(t *testing.T) {
	f := newTripsFixture(t, true)
	ctx := context.Background()
	msg := idem.Message{ID: "order-1", Payload: []byte("charge 5")}
	var (
		calls    int
		stmtErrs []error
	)
	for _, step := range []struct {
		name    string
		restart bool
		want    idem.Outcome
		trips   string
	}{
		{"new key", false, idem.OutcomeProcessed, "BEGIN+INSERT INSERT UPDATE COMMIT"},
		{"redelivery to the same store", false, idem.OutcomeDuplicate, "SELECT"},
		{"redelivery after a restart", true, idem.OutcomeDuplicate, "BEGIN+INSERT SELECT ROLLBACK"},
	} {
		if step.restart {
			f.renew(t)
		}
		f.trips.take()
		res, err := idem.DoTx(ctx, f.g, msg, f.insert("order-1", &calls, &stmtErrs))
		if err != nil || res.Outcome != step.want || string(res.Value) != "ok order-1" {
			t.Fatalf("%s: %v %q, %v; want %v with the first delivery's result", step.name, res.Outcome, res.Value, err, step.want)
		}
		if trips := strings.Join(f.trips.take(), " "); trips != step.trips {
			t.Fatalf("%s: round trips %q, want %q", step.name, trips, step.trips)
		}
	}
	if calls != 1 || len(stmtErrs) != 0 || f.rows(t, "order-1") != 1 {
		t.Fatalf("the handler ran %d times (statement errors %v), %d ledger rows; want one run, one row", calls, stmtErrs, f.rows(t, "order-1"))
	}

	// A key reused with other content: a conflict, from the read alone.
	res, err := idem.DoTx(ctx, f.g, idem.Message{ID: "order-3", Payload: []byte("charge 5")}, f.insert("order-3", &calls, &stmtErrs))
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("order-3: %v, %v", res.Outcome, err)
	}
	f.trips.take()
	other := idem.Message{ID: "order-3", Payload: []byte("charge 6")}
	res, err = idem.DoTx(ctx, f.g, other, f.insert("order-3", &calls, &stmtErrs))
	if !errors.Is(err, idem.ErrConflict) || res.Outcome != idem.OutcomeConflict {
		t.Fatalf("other content: %v, %v; want a conflict", res.Outcome, err)
	}
	if trips := strings.Join(f.trips.take(), " "); trips != "SELECT" {
		t.Fatalf("other content: round trips %q, want the read alone", trips)
	}

	// The marker of order-2 goes in, the handler fails, the transaction
	// rolls back: the store marked the key, but nothing records it.
	failed := errors.New("the business write failed")
	res, err = idem.DoTx(ctx, f.g, idem.Message{ID: "order-2"}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		return nil, failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("failing handler: %v, %v", res.Outcome, err)
	}
	if outcome, trips := f.deliver(t, "order-2"); outcome != idem.OutcomeProcessed || strings.Join(trips, " ") != "BEGIN+INSERT INSERT UPDATE COMMIT" {
		t.Fatalf("retry of the rolled back key: %v, round trips %q; want processed, a new key's", outcome, trips)
	}
	if n := f.rows(t, "order-2"); n != 1 {
		t.Fatalf("ledger has %d rows for order-2, want 1", n)
	}

	// A key the store marked whose record is gone (an operator deleted it,
	// or the sweep after its retention): the read finds nothing, and the
	// claim statement marks it, beginning the transaction.
	if _, err := f.pool.Exec(ctx, `DELETE FROM `+f.table+` WHERE id = 'order-2'`); err != nil {
		t.Fatal(err)
	}
	if outcome, trips := f.deliver(t, "order-2"); outcome != idem.OutcomeProcessed || strings.Join(trips, " ") != "SELECT BEGIN+WITH INSERT UPDATE COMMIT" {
		t.Fatalf("the key whose record was deleted: %v, round trips %q; want processed, the read, then the claim statement with BEGIN", outcome, trips)
	}
}

// A deferred marker that went in with a handler that then failed rolls
// back with it: the store forgets it marked the key, and the retry is
// deferred again as a new key's, not read first as a redelivery.
func TestMarkWithFirstStatementForgetsARolledBackKey(t *testing.T) {
	f := newFirstFixture(t)
	ctx := context.Background()
	failed := errors.New("the handler failed after its statement")
	var (
		calls    int
		stmtErrs []error
	)
	insert := f.insert("order-9", &calls, &stmtErrs)
	_, err := idem.DoTx(ctx, f.g, idem.Message{ID: "order-9"}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		if _, err := insert(ctx, tx); err != nil {
			return nil, err
		}
		return nil, failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("failing handler: %v", err)
	}
	if trips := strings.Join(f.trips.take(), " "); trips != "BEGIN+INSERT+INSERT ROLLBACK" {
		t.Fatalf("failing handler: round trips %q, want the deferred marker with its statement, then the rollback", trips)
	}
	res, err := idem.DoTx(ctx, f.g, idem.Message{ID: "order-9"}, insert)
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("retry: %v, %v; want processed", res.Outcome, err)
	}
	if trips := strings.Join(f.trips.take(), " "); trips != "BEGIN+INSERT+INSERT UPDATE COMMIT" {
		t.Fatalf("retry: round trips %q, want a new key's, deferred", trips)
	}
	if calls != 2 || f.rows(t, "order-9") != 1 {
		t.Fatalf("handler ran %d times, ledger has %d rows; want 2 runs, 1 row", calls, f.rows(t, "order-9"))
	}
}

// Without MarkWithFirstStatement, a run of redeliveries the store did not
// mark (a consumer restarting from an old offset) costs its first markers
// the insert, the read and the rollback; once recorded keys are common, the
// insert that reads; once they are most, the read alone, before any
// transaction. New keys after the run bring back the insert alone.
func TestMarkDuringARunOfRedeliveries(t *testing.T) {
	f := newTripsFixture(t, true)
	do := func(id string) (idem.Outcome, string) {
		t.Helper()
		outcome, trips := f.deliver(t, id)
		return outcome, strings.Join(trips, " ")
	}
	for i := range 60 {
		do(fmt.Sprintf("old-%d", i))
	}
	f.renew(t)
	const (
		insertThenRead = "BEGIN+INSERT SELECT ROLLBACK"
		insertOrRead   = "BEGIN+WITH ROLLBACK"
		readAlone      = "SELECT"
	)
	steps := []string{insertThenRead, insertOrRead, readAlone}
	var at [3]int // the redelivery where each way began
	step := 0
	for i := range 60 {
		outcome, trips := do(fmt.Sprintf("old-%d", i))
		if outcome != idem.OutcomeDuplicate {
			t.Fatalf("redelivery %d: %v, want a duplicate", i, outcome)
		}
		for step < len(steps)-1 && trips != steps[step] && trips == steps[step+1] {
			step++
			at[step] = i
		}
		if trips != steps[step] {
			t.Fatalf("redelivery %d: round trips %q, want %q", i, trips, steps[step])
		}
	}
	if step != 2 || at[1] > 12 || at[2] > 30 {
		t.Fatalf("a run of 60 redeliveries: the insert that reads from the %dth, the read alone from the %dth (reached %d); want within 12 and 30", at[1], at[2], step)
	}
	for i := range 60 {
		outcome, trips := do(fmt.Sprintf("new-%d", i))
		if outcome != idem.OutcomeProcessed {
			t.Fatalf("new key %d: %v", i, outcome)
		}
		if trips == "BEGIN+INSERT INSERT UPDATE COMMIT" {
			return
		}
	}
	t.Fatal("60 new keys after the run of redeliveries: the marker never went as the insert alone")
}

// The conformance suite with a store that remembers no key it marked: every
// redelivery's marker is the insert alone, then the read.
func TestConformanceTxForgetMarks(t *testing.T) {
	storetest.RunTx(t, func(t *testing.T) storetest.TxStore[pgx.Tx] {
		s := newStore(t, postgres.Options{})
		postgres.ForgetMarks(s)
		return s
	})
}

func TestConformanceTxMarkWithFirstStatement(t *testing.T) {
	storetest.RunTx(t, func(t *testing.T) storetest.TxStore[pgx.Tx] {
		s := newStore(t, postgres.Options{MarkWithFirstStatement: true})
		postgres.NeverPauseFirst(s)
		return s
	})
}

// A deferred marker that meets a recorded key runs the handler's first
// statement for nothing. The store reads the record first for the keys it
// marked lately (so a steady 10% of redeliveries of its own keys never
// starts a handler), defers every other one, and once recorded keys come in
// a run that it did not mark (a consumer restarting from an old offset)
// sends the marker first for all, then, once most keys come out recorded,
// reads each record before the transaction begins; it defers again once
// new keys are back.
func TestMarkWithFirstStatementFallsBackDuringARunOfRedeliveries(t *testing.T) {
	f := newFirstFixture(t)
	do := func(id string) []string {
		t.Helper()
		_, trips := f.deliver(t, id)
		return trips
	}
	deferred := func(trips []string) bool { return len(trips) > 0 && trips[0] == "BEGIN+INSERT+INSERT" }
	for i := range 300 {
		id, redelivery := fmt.Sprintf("steady-%d", i), i%10 == 9
		if redelivery {
			id = fmt.Sprintf("steady-%d", i-5)
		}
		switch trips := do(id); {
		case !redelivery && !deferred(trips):
			t.Fatalf("new message %d at 10%% redeliveries: %q, want the marker deferred", i, trips)
		case redelivery && strings.Join(trips, " ") != "SELECT":
			t.Fatalf("redelivery %d of a key the store marked: %q, want the read of its record alone", i, trips)
		}
	}
	// A restart, then a run of redeliveries: each deferred marker misses
	// and its run reads the record; the store stops deferring within a
	// dozen, and sends the marker first, reading in the insert's statement;
	// from the point where most markers met recorded keys, it reads the
	// record alone, with no transaction, for the rest of the run.
	f.renew(t)
	first, read := -1, -1
	for i := range 60 {
		trips := do(fmt.Sprintf("steady-%d", 5*i)) // each a first delivery above
		switch {
		case first < 0 && !deferred(trips):
			first = i
		case first >= 0 && deferred(trips):
			t.Fatalf("redelivery %d of a run: %q, deferred again after %d sent first", i, trips, i-first)
		}
		got := strings.Join(trips, " ")
		if first >= 0 && read < 0 && got == "SELECT" {
			read = i
		}
		want := "BEGIN+INSERT+INSERT ROLLBACK SELECT"
		switch {
		case read >= 0:
			want = "SELECT"
		case first >= 0:
			want = "BEGIN+WITH ROLLBACK"
		}
		if got != want {
			t.Fatalf("redelivery %d of a run: %q, want %q", i, got, want)
		}
	}
	if first < 0 || first > 12 {
		t.Fatalf("a run of 60 redeliveries: the first marker sent first was the %dth, want one within 12", first)
	}
	if read < 0 || read > 30 {
		t.Fatalf("a run of 60 redeliveries: the first read alone was the %dth, want one within 30", read)
	}
	// New keys after the run: the store defers again within 60.
	for i := range 60 {
		if deferred(do(fmt.Sprintf("after-%d", i))) {
			return
		}
	}
	t.Fatal("60 new keys after the run of redeliveries: no marker deferred")
}

// roundTrips records what each round trip to the server carried: the first
// word of each statement, batched statements joined with "+".
type roundTrips struct {
	mu   sync.Mutex
	sent []string
}

func firstWord(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return ""
	}
	return strings.ToUpper(f[0])
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if ctx.Value(inBatch{}) == nil {
		r.add(firstWord(d.SQL))
	}
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type inBatch struct{}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var words []string
	for _, q := range d.Batch.QueuedQueries {
		words = append(words, firstWord(q.SQL))
	}
	r.add(strings.Join(words, "+"))
	return context.WithValue(ctx, inBatch{}, true)
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *roundTrips) add(s string) {
	r.mu.Lock()
	r.sent = append(r.sent, s)
	r.mu.Unlock()
}

func (r *roundTrips) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sent
	r.sent = nil
	return s
}

// firstStore returns a store with MarkWithFirstStatement on a pool of its own
// whose round trips are recorded, a ledger table, and a guard over the store
// whose clock the test moves.
type firstFixture struct {
	pool   *pgxpool.Pool
	table  string
	s      *postgres.Store
	trips  *roundTrips
	ledger string
	g      *idem.Guard
	now    time.Time
	last   idem.Event // the guard's latest event
	nowMu  sync.Mutex // guards now and last

	markFirst bool // the store sends the marker first (no MarkWithFirstStatement)
}

func (f *firstFixture) lastEvent() idem.Event {
	f.nowMu.Lock()
	defer f.nowMu.Unlock()
	return f.last
}

func newFirstFixture(t *testing.T) *firstFixture {
	t.Helper()
	return newTripsFixture(t, false)
}

// newTripsFixture is newFirstFixture, with a store that sends the marker
// first (the default) when markFirst.
func newTripsFixture(t *testing.T, markFirst bool) *firstFixture {
	t.Helper()
	base := newStore(t, postgres.Options{})
	f := &firstFixture{trips: &roundTrips{}, ledger: newBusinessTable(t, base), now: time.Now(), markFirst: markFirst}
	cfg := testPool(t).Config()
	cfg.MaxConns = 4
	cfg.ConnConfig.Tracer = f.trips
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f.pool, f.table = pool, strings.ReplaceAll(base.Table(), `"`, "")
	f.renew(t)
	return f
}

// renew replaces the store and the guard by new ones on the same table: a
// store that met a recorded key sends its next markers first (DeferMark),
// and a test that wants them deferred again starts afresh.
func (f *firstFixture) renew(t *testing.T) {
	t.Helper()
	var err error
	f.s, err = postgres.New(f.pool, postgres.Options{Table: f.table, MarkWithFirstStatement: !f.markFirst})
	if err != nil {
		t.Fatal(err)
	}
	f.g, err = idem.New(f.s, idem.Options{Scope: "billing", Lease: time.Minute, Retention: time.Hour, Clock: func() time.Time {
		f.nowMu.Lock()
		defer f.nowMu.Unlock()
		return f.now
	}, Observer: idem.ObserverFunc(func(_ context.Context, e idem.Event) {
		f.nowMu.Lock()
		f.last = e
		f.nowMu.Unlock()
	})})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *firstFixture) rows(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := testPool(t).QueryRow(context.Background(), `SELECT count(*) FROM `+f.ledger+` WHERE msg = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// deliver runs idem.DoTx for a message id with insert as its handler,
// failing the test on an error, and returns the outcome and the round trips
// it took.
func (f *firstFixture) deliver(t *testing.T, id string) (idem.Outcome, []string) {
	t.Helper()
	f.trips.take()
	var calls int
	var errs []error
	res, err := idem.DoTx(context.Background(), f.g, idem.Message{ID: id}, f.insert(id, &calls, &errs))
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return res.Outcome, f.trips.take()
}

// insert is a handler that writes one ledger row for id with Exec and
// counts its calls and the errors its statement returned.
func (f *firstFixture) insert(id string, calls *int, stmtErrs *[]error) idem.TxHandler[pgx.Tx] {
	return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		*calls++
		_, err := tx.Exec(ctx, `INSERT INTO `+f.ledger+` (msg, amount) VALUES ($1, 5)`, id)
		if err != nil {
			*stmtErrs = append(*stmtErrs, err)
			return nil, err
		}
		return []byte("ok " + id), nil
	}
}

// A new key costs two round trips: BEGIN, marker and the handler's first
// statement in one, COMMIT in the other. A key the store marked lately is
// most likely a redelivery: its record is read before the transaction
// begins, and the handler never starts. Any other recorded key (here after
// a restart: a new store) fails the handler's first statement with ErrRerun
// and rolls back; the run that follows reads the record and skips the
// handler with the recorded result.
func TestMarkWithFirstStatementSavesTheRoundTrip(t *testing.T) {
	f := newFirstFixture(t)
	ctx := context.Background()
	msg := idem.Message{ID: "order-1", Payload: []byte("charge 5")}
	var (
		calls    int
		stmtErrs []error
	)
	f.trips.take()
	res, err := idem.DoTx(ctx, f.g, msg, f.insert("order-1", &calls, &stmtErrs))
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("first delivery: %v, %v", res.Outcome, err)
	}
	if e := f.lastEvent(); e.TxRuns != 1 || e.Outcome != idem.OutcomeProcessed {
		t.Fatalf("first delivery's event: %d runs, %v", e.TxRuns, e.Outcome)
	}
	trips := f.trips.take()
	// SaveResult is a statement of its own after the handler's.
	want := []string{"BEGIN+INSERT+INSERT", "UPDATE", "COMMIT"}
	if strings.Join(trips, " ") != strings.Join(want, " ") {
		t.Fatalf("round trips %q, want %q", trips, want)
	}

	res, err = idem.DoTx(ctx, f.g, msg, f.insert("order-1", &calls, &stmtErrs))
	if err != nil || res.Outcome != idem.OutcomeDuplicate || string(res.Value) != "ok order-1" {
		t.Fatalf("redelivery to the same store: %v %q, %v", res.Outcome, res.Value, err)
	}
	if calls != 1 || len(stmtErrs) != 0 {
		t.Fatalf("redelivery to the same store: handler ran %d times (statement errors %v), want only the first delivery's run", calls, stmtErrs)
	}
	if trips := f.trips.take(); strings.Join(trips, " ") != "SELECT" {
		t.Fatalf("redelivery to the same store: round trips %q, want the read of its record alone", trips)
	}

	f.renew(t)
	res, err = idem.DoTx(ctx, f.g, msg, f.insert("order-1", &calls, &stmtErrs))
	if err != nil || res.Outcome != idem.OutcomeDuplicate || string(res.Value) != "ok order-1" {
		t.Fatalf("redelivery: %v %q, %v", res.Outcome, res.Value, err)
	}
	if calls != 2 || len(stmtErrs) != 1 || !errors.Is(stmtErrs[0], postgres.ErrRerun) {
		t.Fatalf("handler ran %d times, its statement failed with %v; want 2 runs, one ErrRerun", calls, stmtErrs)
	}
	if e := f.lastEvent(); e.TxRuns != 2 || e.Outcome != idem.OutcomeDuplicate || e.Err != nil {
		t.Fatalf("redelivery's event: %d runs, %v, %v; want 2 runs, a duplicate", e.TxRuns, e.Outcome, e.Err)
	}
	// The rerun knows the key is recorded: it reads the record without
	// trying the insert again, before its transaction begins.
	trips = f.trips.take()
	if want := "BEGIN+INSERT+INSERT ROLLBACK SELECT"; strings.Join(trips, " ") != want {
		t.Fatalf("redelivery round trips %q, want %q: the batch, its rollback and the read", trips, want)
	}
	if n := f.rows(t, "order-1"); n != 1 {
		t.Fatalf("ledger has %d rows for order-1", n)
	}

	// A first Query carries the marker the same way.
	f.renew(t)
	res, err = idem.DoTx(ctx, f.g, idem.Message{ID: "order-2"}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		rows, err := tx.Query(ctx, `SELECT msg FROM `+f.ledger)
		if err != nil {
			return nil, err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err == nil && len(ids) != 1 {
			err = fmt.Errorf("read %q", ids)
		}
		return nil, err
	})
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("Query first: %v, %v", res.Outcome, err)
	}
	if trips := f.trips.take(); strings.Join(trips, " ") != "BEGIN+INSERT+SELECT COMMIT" {
		t.Fatalf("Query first: round trips %q", trips)
	}
}

// Whatever the handler does with the failed statement, nothing of the
// abandoned run commits and DoTx reports what the ordinary path decides.
func TestMarkWithFirstStatementHandlers(t *testing.T) {
	f := newFirstFixture(t)
	ctx := context.Background()
	boom := idem.Permanent(errors.New("bad payload"))
	seed := func(id string) {
		t.Helper()
		var calls int
		var errs []error
		if res, err := idem.DoTx(ctx, f.g, idem.Message{ID: id, Payload: []byte(id)}, f.insert(id, &calls, &errs)); err != nil || res.Outcome != idem.OutcomeProcessed {
			t.Fatalf("seed %s: %v, %v", id, res.Outcome, err)
		}
	}
	for _, tc := range []struct {
		name    string
		handler func(id string) idem.TxHandler[pgx.Tx]
		newKey  idem.Outcome // outcome for a new key
		newErr  error
		newRows int
	}{
		{"swallows the error", func(id string) idem.TxHandler[pgx.Tx] {
			return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				tx.Exec(ctx, `INSERT INTO `+f.ledger+` (msg, amount) VALUES ($1, 5)`, id)
				tx.Exec(ctx, `INSERT INTO `+f.ledger+` (msg, amount) VALUES ($1, 5)`, id)
				return []byte("swallowed"), nil
			}
		}, idem.OutcomeProcessed, nil, 2},
		{"QueryRow first", func(id string) idem.TxHandler[pgx.Tx] {
			return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				var n int
				err := tx.QueryRow(ctx, `INSERT INTO `+f.ledger+` (msg, amount) VALUES ($1, 5) RETURNING amount`, id).Scan(&n)
				return nil, err
			}
		}, idem.OutcomeProcessed, nil, 1},
		{"Query first", func(id string) idem.TxHandler[pgx.Tx] {
			return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				rows, err := tx.Query(ctx, `INSERT INTO `+f.ledger+` (msg, amount) VALUES ($1, 5) RETURNING amount`, id)
				if err != nil {
					return nil, err
				}
				rows.Close()
				return nil, rows.Err()
			}
		}, idem.OutcomeProcessed, nil, 1},
		{"no statement, a result", func(string) idem.TxHandler[pgx.Tx] {
			return func(context.Context, pgx.Tx) ([]byte, error) { return []byte("computed"), nil }
		}, idem.OutcomeProcessed, nil, 0},
		{"no statement, no result", func(string) idem.TxHandler[pgx.Tx] {
			return func(context.Context, pgx.Tx) ([]byte, error) { return nil, nil }
		}, idem.OutcomeProcessed, nil, 0},
		{"fails before any statement", func(string) idem.TxHandler[pgx.Tx] {
			return func(context.Context, pgx.Tx) ([]byte, error) { return nil, boom }
		}, idem.OutcomePermanent, boom, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.renew(t)
			id := "new-" + strings.ReplaceAll(tc.name, " ", "-")
			msg := idem.Message{ID: id, Payload: []byte(id)}
			res, err := idem.DoTx(ctx, f.g, msg, tc.handler(id))
			if res.Outcome != tc.newKey || !errors.Is(err, tc.newErr) || (tc.newErr == nil && err != nil) {
				t.Fatalf("new key: %v, %v; want %v, %v", res.Outcome, err, tc.newKey, tc.newErr)
			}
			if n := f.rows(t, id); n != tc.newRows {
				t.Fatalf("new key: %d ledger rows, want %d", n, tc.newRows)
			}
			_, getErr := f.s.Get(ctx, idem.Key{Scope: "billing", ID: id})
			if recorded := getErr == nil; recorded != (tc.newErr == nil) {
				t.Fatalf("new key: marker recorded %v (%v) after %v", recorded, getErr, err)
			}

			// The same handler on a key processed before: skipped, and the
			// ledger keeps the seed's single row.
			dup := "dup-" + id
			seed(dup)
			f.renew(t)
			res, err = idem.DoTx(ctx, f.g, idem.Message{ID: dup, Payload: []byte(dup)}, tc.handler(dup))
			if err != nil || res.Outcome != idem.OutcomeDuplicate || string(res.Value) != "ok "+dup {
				t.Fatalf("recorded key: %v %q, %v; want a duplicate with the seed's result", res.Outcome, res.Value, err)
			}
			if n := f.rows(t, dup); n != 1 {
				t.Fatalf("recorded key: %d ledger rows, want the seed's 1", n)
			}
		})
	}
}

// Keys that exist but are not plain duplicates go the ordinary way too: an
// expired record is taken over (the handler's abandoned run plus the real
// one), other content is a conflict, a live two-phase owner is in progress.
func TestMarkWithFirstStatementExistingKeys(t *testing.T) {
	f := newFirstFixture(t)
	ctx := context.Background()
	var (
		calls int
		errs  []error
	)
	msg := idem.Message{ID: "expiring", Payload: []byte("v1")}
	if res, err := idem.DoTx(ctx, f.g, msg, f.insert("expiring", &calls, &errs)); err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("first: %v, %v", res.Outcome, err)
	}
	f.nowMu.Lock()
	f.now = f.now.Add(2 * time.Hour) // past Retention
	f.nowMu.Unlock()
	f.renew(t) // a store that did not mark the key defers its marker
	calls, errs = 0, nil
	res, err := idem.DoTx(ctx, f.g, msg, f.insert("expiring", &calls, &errs))
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("after expiry: %v, %v", res.Outcome, err)
	}
	if calls != 2 || len(errs) != 1 || res.Record.Token < 2 {
		t.Fatalf("after expiry: %d runs, statement errors %v, token %d; want the abandoned run and the real one", calls, errs, res.Record.Token)
	}
	if n := f.rows(t, "expiring"); n != 2 {
		t.Fatalf("ledger has %d rows for the expired and retaken key, want 2", n)
	}

	res, err = idem.DoTx(ctx, f.g, idem.Message{ID: "expiring", Payload: []byte("other")}, f.insert("expiring", &calls, &errs))
	var ce *idem.ConflictError
	if res.Outcome != idem.OutcomeConflict || !errors.As(err, &ce) {
		t.Fatalf("other content: %v, %v", res.Outcome, err)
	}

	owner := idem.Message{ID: "two-phase", Payload: []byte("p")}
	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := f.g.Do(ctx, owner, func(context.Context) ([]byte, error) {
			close(held)
			<-release
			return nil, nil
		})
		done <- err
	}()
	<-held
	res, err = idem.DoTx(ctx, f.g, owner, f.insert("two-phase", &calls, &errs))
	close(release)
	if res.Outcome != idem.OutcomeInProgress || !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("live two-phase owner: %v, %v", res.Outcome, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := f.rows(t, "two-phase"); n != 0 {
		t.Fatalf("ledger has %d rows for a key held by a two-phase owner", n)
	}
}

// Mark and idem.MarkTx answer at once even with the option: a caller's own
// transaction needs the outcome before its writes.
func TestMarkWithFirstStatementOnlyDefersDoTx(t *testing.T) {
	f := newFirstFixture(t)
	ctx := context.Background()
	k := idem.Key{Scope: "billing", ID: "direct"}
	now := time.Now()
	req := idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	for i, want := range []idem.ClaimOutcome{idem.ClaimAcquired, idem.ClaimDuplicate} {
		err := f.s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			c, err := f.s.Mark(ctx, tx, req)
			if err == nil && c.Outcome != want {
				err = fmt.Errorf("Mark #%d = %v, want %v", i+1, c.Outcome, want)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	msg := idem.Message{ID: "marktx", Payload: []byte("p")}
	for i, want := range []idem.Outcome{idem.OutcomeProcessed, idem.OutcomeDuplicate} {
		err := f.s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			res, err := idem.MarkTx(ctx, f.g, tx, msg)
			if err == nil && res.Outcome != want {
				err = fmt.Errorf("MarkTx #%d = %v, want %v", i+1, res.Outcome, want)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
