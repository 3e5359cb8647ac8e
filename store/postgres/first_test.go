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

func TestConformanceTxMarkWithFirstStatement(t *testing.T) {
	storetest.RunTx(t, func(t *testing.T) storetest.TxStore[pgx.Tx] {
		s := newStore(t, postgres.Options{MarkWithFirstStatement: true})
		postgres.NeverPauseFirst(s)
		return s
	})
}

// After a deferred marker meets a recorded key, the store's next 64 DoTx
// transactions send the marker first (a run of redeliveries then costs what
// it costs without the option); the 65th defers again.
func TestMarkWithFirstStatementPausesAfterARecordedKey(t *testing.T) {
	f := newFirstFixture(t)
	ctx := context.Background()
	do := func(id string) []string {
		t.Helper()
		f.trips.take()
		var calls int
		var errs []error
		if _, err := idem.DoTx(ctx, f.g, idem.Message{ID: id}, f.insert(id, &calls, &errs)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return f.trips.take()
	}
	deferred := func(trips []string) bool { return len(trips) > 0 && trips[0] == "BEGIN+INSERT+INSERT" }
	if !deferred(do("a")) {
		t.Fatal("a new store did not defer its marker")
	}
	if trips := do("a"); !deferred(trips) {
		t.Fatalf("the redelivery of a was not deferred first: %q", trips)
	}
	for i := range 64 {
		if trips := do(fmt.Sprintf("after-%d", i)); deferred(trips) || trips[0] != "BEGIN+INSERT" {
			t.Fatalf("transaction %d after the recorded key: %q, want the marker first", i+1, trips)
		}
	}
	if trips := do("later"); !deferred(trips) {
		t.Fatalf("the 65th transaction after the recorded key: %q, want the marker deferred again", trips)
	}
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
}

func (f *firstFixture) lastEvent() idem.Event {
	f.nowMu.Lock()
	defer f.nowMu.Unlock()
	return f.last
}

func newFirstFixture(t *testing.T) *firstFixture {
	t.Helper()
	base := newStore(t, postgres.Options{})
	f := &firstFixture{trips: &roundTrips{}, ledger: newBusinessTable(t, base), now: time.Now()}
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
	f.s, err = postgres.New(f.pool, postgres.Options{Table: f.table, MarkWithFirstStatement: true})
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
// statement in one, COMMIT in the other. A recorded key fails that first
// statement with ErrRerun, rolls back and runs again the ordinary way, where
// it is skipped with the recorded result.
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
		t.Fatalf("redelivery: %v %q, %v", res.Outcome, res.Value, err)
	}
	if calls != 2 || len(stmtErrs) != 1 || !errors.Is(stmtErrs[0], postgres.ErrRerun) {
		t.Fatalf("handler ran %d times, its statement failed with %v; want 2 runs, one ErrRerun", calls, stmtErrs)
	}
	if e := f.lastEvent(); e.TxRuns != 2 || e.Outcome != idem.OutcomeDuplicate || e.Err != nil {
		t.Fatalf("redelivery's event: %d runs, %v, %v; want 2 runs, a duplicate", e.TxRuns, e.Outcome, e.Err)
	}
	trips = f.trips.take()
	if len(trips) < 3 || trips[0] != "BEGIN+INSERT+INSERT" || trips[1] != "ROLLBACK" || !strings.HasPrefix(trips[2], "BEGIN+INSERT") {
		t.Fatalf("redelivery round trips %q: want the batch, a rollback, then the ordinary marker", trips)
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
