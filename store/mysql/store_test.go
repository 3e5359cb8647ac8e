package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/mysql"
	"github.com/idemgo/idem/store/storekit"
	"github.com/idemgo/idem/store/storetest"
)

var t0 = storetest.T0

func req(k idem.Key, now time.Time) idem.ClaimRequest {
	return idem.ClaimRequest{Key: k, Fingerprint: "fp", Now: now, LeaseUntil: now.Add(10 * time.Second),
		ExpiresAt: now.Add(time.Hour), TakeOverStale: true}
}

func TestTableNames(t *testing.T) {
	db := openDB(t, true, false)
	for _, name := range []string{"x`; DROP TABLE t; --", "1abc", "with space", "dotted.name", "ünï", strings.Repeat("a", mysql.MaxTableLen+1)} {
		_, err := mysql.New(db, mysql.Options{Table: name})
		var te *mysql.TableError
		if !errors.As(err, &te) || !errors.Is(err, idem.ErrInvalidOptions) || te.Table != name {
			t.Errorf("New(table %q) = %v, want a *TableError that is idem.ErrInvalidOptions", name, err)
		}
	}
	for _, name := range []string{"", "idem_records", "_x1", strings.Repeat("a", mysql.MaxTableLen)} {
		s, err := mysql.New(db, mysql.Options{Table: name})
		if err != nil {
			t.Errorf("New(table %q): %v", name, err)
			continue
		}
		if name == "" && s.Table() != mysql.DefaultTable {
			t.Errorf("default table = %q", s.Table())
		}
	}
	if _, err := mysql.New(nil, mysql.Options{}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("New(nil db) = %v", err)
	}
	if _, err := mysql.Open("not a dsn", mysql.Options{}); err == nil {
		t.Error("Open with a malformed DSN succeeded")
	}
}

// TestMigrateConcurrent: instances migrating one table at once all succeed,
// the schema is applied once, and migrating again changes nothing.
func TestMigrateConcurrent(t *testing.T) {
	db := openDB(t, true, false)
	table := tableName(t)
	t.Cleanup(func() { dropStore(t, db, table) })
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := mysql.New(db, mysql.Options{Table: table})
			if err == nil {
				err = s.Migrate(context.Background())
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	s, _ := mysql.New(db, mysql.Options{Table: table})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	var rows int
	const migrations = 2 // 001_records, 002_null_times
	if err := db.QueryRow("SELECT COUNT(*) FROM `" + table + "_migrations`").Scan(&rows); err != nil || rows != migrations {
		t.Fatalf("migration rows = %d, %v; want %d", rows, err, migrations)
	}
	if v, err := s.SchemaVersion(context.Background()); err != nil || v != migrations {
		t.Fatalf("SchemaVersion = %d, %v", v, err)
	}
	fresh, _ := mysql.New(db, mysql.Options{Table: tableName(t)})
	if v, err := fresh.SchemaVersion(context.Background()); err != nil || v != 0 {
		t.Fatalf("SchemaVersion before Migrate = %d, %v", v, err)
	}
}

// TestKeysByteExact: keys that a case-, accent- or pad-insensitive collation
// would fold together stay distinct.
func TestKeysByteExact(t *testing.T) {
	s := newStore(t, openDB(t, true, false))
	for _, id := range []string{"a", "a ", "A", "á", "a\t", "ａ"} {
		c, err := s.Claim(context.Background(), req(idem.Key{Scope: "s", ID: id}, t0))
		if err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("Claim(%q) = %v, %v; want acquired (a distinct key)", id, c.Outcome, err)
		}
	}
	if _, err := s.Claim(context.Background(), req(idem.Key{Scope: "S", ID: "a"}, t0)); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Claim(context.Background(), req(idem.Key{Scope: "s", ID: "a"}, t0)); c.Outcome != idem.ClaimInProgress {
		t.Fatalf("reclaim of s/a = %v", c.Outcome)
	}
}

// TestValidation: what the columns cannot hold is refused before the server
// sees it (a non-strict sql_mode would truncate it silently), except the
// fingerprint, which Prepare stores hashed when it is too long to keep.
func TestValidation(t *testing.T) {
	s := newStore(t, openDB(t, true, false))
	ctx := context.Background()
	r := req(idem.Key{Scope: "s", ID: "long-fp"}, t0)
	r.Fingerprint = strings.Repeat("f", mysql.MaxFingerprintLen+1)
	if c, err := s.Claim(ctx, r); err != nil || c.Record.Fingerprint != storekit.StoredFingerprint(r.Fingerprint) {
		t.Fatalf("Claim with an oversized fingerprint = %q, %v; want it stored hashed", c.Record.Fingerprint, err)
	}
	if _, err := s.Claim(ctx, req(idem.Key{Scope: strings.Repeat("s", idem.MaxScopeLen+1), ID: "x"}, t0)); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("Claim with an oversized scope = %v", err)
	}
	dup := []idem.ClaimRequest{req(idem.Key{Scope: "s", ID: "d"}, t0), req(idem.Key{Scope: "s", ID: "d"}, t0)}
	if _, err := s.ClaimBatch(ctx, dup); !errors.Is(err, idem.ErrDuplicateKeyInBatch) || !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("ClaimBatch with a repeated key = %v", err)
	}
	if _, err := s.Get(ctx, idem.Key{Scope: "s", ID: "x"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("a refused claim left a record: %v", err)
	}
}

// TestRenewUnchanged: renewing to the very same lease changes no row, which
// MySQL reports as zero affected rows unless clientFoundRows is set; the
// owner must not be told its lease is lost, in either mode.
func TestRenewUnchanged(t *testing.T) {
	eachMode(t, func(t *testing.T, db *sql.DB) {
		s := newStore(t, db)
		ctx := context.Background()
		k := idem.Key{Scope: "s", ID: "renew"}
		c, err := s.Claim(ctx, req(k, t0))
		if err != nil {
			t.Fatal(err)
		}
		rr := idem.RenewRequest{Key: k, Token: c.Record.Token, Now: t0, LeaseUntil: t0.Add(10 * time.Second)}
		for i := range 2 {
			if err := s.Renew(ctx, rr); err != nil {
				t.Fatalf("Renew #%d with unchanged values: %v", i, err)
			}
		}
		rr.Token++
		if err := s.Renew(ctx, rr); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("Renew with a wrong token = %v", err)
		}
	})
}

// TestSweepOneInstance: while another session holds the table's sweep lock,
// Sweep deletes nothing; afterwards it deletes the expired rows in batches.
func TestSweepOneInstance(t *testing.T) {
	db := openDB(t, true, false)
	s := newStore(t, db)
	ctx := context.Background()
	for i := range 5 {
		r := req(idem.Key{Scope: "s", ID: fmt.Sprint("old-", i)}, t0)
		c, err := s.Claim(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, idem.CompleteRequest{Key: r.Key, Token: c.Record.Token, Now: t0, ExpiresAt: r.ExpiresAt}); err != nil {
			t.Fatal(err)
		}
	}
	live := req(idem.Key{Scope: "s", ID: "live"}, t0)
	live.ExpiresAt = t0.Add(48 * time.Hour)
	if _, err := s.Claim(ctx, live); err != nil {
		t.Fatal(err)
	}
	other, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const name = "CONCAT('idem:sweep:', SHA1(CONCAT(DATABASE(), '.', ?)))"
	var got int
	if err := other.QueryRowContext(ctx, "SELECT GET_LOCK("+name+", 0)", s.Table()).Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK = %d, %v", got, err)
	}
	later := idem.SweepRequest{Now: t0.Add(2 * time.Hour), Limit: 2}
	if n, err := s.Sweep(ctx, later); err != nil || n != 0 {
		t.Fatalf("Sweep while another instance sweeps = %d, %v; want 0", n, err)
	}
	if _, err := other.ExecContext(ctx, "DO RELEASE_LOCK("+name+")", s.Table()); err != nil {
		t.Fatal(err)
	}
	total := 0
	for range 5 {
		n, err := s.Sweep(ctx, later)
		if err != nil || n > 2 {
			t.Fatalf("Sweep = %d, %v", n, err)
		}
		total += n
	}
	if total != 5 {
		t.Fatalf("swept %d, want 5", total)
	}
	if _, err := s.Get(ctx, live.Key); err != nil {
		t.Fatalf("live record: %v", err)
	}
	for _, limit := range []int{0, -1} {
		if n, err := s.Sweep(ctx, idem.SweepRequest{Now: later.Now, Limit: limit}); n != 0 || err != nil {
			t.Fatalf("Sweep with Limit %d = %d, %v", limit, n, err)
		}
	}
}

// TestConcurrentBatches: batches with overlapping keys run at once; every
// key is acquired by exactly one of them and none fails.
func TestConcurrentBatches(t *testing.T) {
	s := newStore(t, openDB(t, true, false))
	const workers, keys = 8, 300
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		won   = map[string]int{}
		errs  []error
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var reqs []idem.ClaimRequest
			for i := range keys {
				// Each worker takes a different, overlapping slice, in its own order.
				j := (i*7 + w*37) % keys
				if (j+w)%3 != 0 {
					reqs = append(reqs, req(idem.Key{Scope: fmt.Sprint("scope-", j%2), ID: fmt.Sprint("k-", j)}, t0))
				}
			}
			<-start
			claims, err := s.ClaimBatch(context.Background(), reqs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			for i, c := range claims {
				switch c.Outcome {
				case idem.ClaimAcquired:
					won[reqs[i].Key.String()]++
				case idem.ClaimInProgress:
				default:
					errs = append(errs, fmt.Errorf("%s: %v", reqs[i].Key, c.Outcome))
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	for k, n := range won {
		if n != 1 {
			t.Errorf("key %s acquired %d times", k, n)
		}
	}
	recs, err := s.List(context.Background(), idem.ListFilter{Limit: 10 * keys})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(won) {
		t.Fatalf("%d records stored, %d keys acquired", len(recs), len(won))
	}
}

func TestInspector(t *testing.T) {
	s := newStore(t, openDB(t, true, false))
	ctx := context.Background()
	claim := func(scope, id string, now time.Time) idem.Claim {
		c, err := s.Claim(ctx, req(idem.Key{Scope: scope, ID: id}, now))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a1 := claim("a", "1", t0)
	claim("a", "2", t0.Add(time.Minute))
	r3 := claim("a", "3", t0)
	b1 := claim("b", "1", t0)
	long := strings.Repeat("L", 300)
	claim("b", long, t0)
	if err := s.Complete(ctx, idem.CompleteRequest{Key: a1.Record.Key(), Token: a1.Record.Token, Result: []byte("r"), Now: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, idem.ReleaseRequest{Key: r3.Record.Key(), Token: r3.Record.Token, Now: t0}); err != nil {
		t.Fatal(err)
	}
	ids := func(rs []idem.Record) string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Scope+"/"+r.DisplayID[:min(len(r.DisplayID), 3)])
		}
		return strings.Join(out, ",")
	}
	list := func(f idem.ListFilter) string {
		rs, err := s.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return ids(rs)
	}
	// The hashed id sorts by its stored form ("sha256:..."), after "1".
	for _, tc := range []struct {
		f    idem.ListFilter
		want string
	}{
		{idem.ListFilter{}, "a/1,a/2,a/3,b/1,b/LLL"},
		{idem.ListFilter{Limit: 2}, "a/1,a/2"},
		{idem.ListFilter{After: idem.Record{Scope: "a", ID: "2"}.Cursor(), Limit: 2}, "a/3,b/1"},
		{idem.ListFilter{Scope: "b"}, "b/1,b/LLL"},
		{idem.ListFilter{State: idem.StateCompleted}, "a/1"},
		{idem.ListFilter{State: idem.StateReleased}, "a/3"},
		{idem.ListFilter{StaleAt: t0.Add(30 * time.Second)}, "b/1,b/LLL"},
		{idem.ListFilter{CreatedBefore: t0.Add(time.Second), Scope: "a"}, "a/1,a/3"},
	} {
		if got := list(tc.f); got != tc.want {
			t.Errorf("List(%+v) = %s, want %s", tc.f, got, tc.want)
		}
	}
	got, err := s.Get(ctx, idem.Key{Scope: "b", ID: long})
	if err != nil || got.DisplayID != long || len(got.ID) > idem.MaxIDLen {
		t.Fatalf("hashed id record: %q %q %v", got.ID, got.DisplayID, err)
	}
	stats, err := s.Stats(ctx, t0.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []idem.ScopeStats{
		{Scope: "a", InProgress: 1, Completed: 1, Released: 1, Stale: 1, OldestInProgress: t0.Add(time.Minute)},
		{Scope: "b", InProgress: 2, Stale: 2, OldestInProgress: b1.Record.CreatedAt},
	}
	if fmt.Sprint(stats) != fmt.Sprint(want) {
		t.Fatalf("Stats = %+v\nwant    %+v", stats, want)
	}
	stats, _ = s.Stats(ctx, t0.Add(2*time.Hour))
	if stats[0].Expired != 2 || stats[1].Expired != 0 { // in progress, stale or not, never expires
		t.Fatalf("Stats after retention = %+v", stats)
	}
}

// TestStoreOutage: with the server unreachable, nothing is reported as
// acquired or processed, and the guard says retry (do not ack).
func TestStoreOutage(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	s, err := mysql.Open("root@tcp("+addr+")/test?timeout=2s", mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	k := idem.Key{Scope: "s", ID: "down"}
	if c, err := s.Claim(ctx, req(k, t0)); err == nil || c.Outcome == idem.ClaimAcquired || idem.IsPermanent(err) {
		t.Fatalf("Claim with the store down = %v, %v; want a retryable error", c.Outcome, err)
	}
	if cs, err := s.ClaimBatch(ctx, []idem.ClaimRequest{req(k, t0)}); err == nil || cs != nil {
		t.Fatalf("ClaimBatch with the store down = %v, %v", cs, err)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: 1, Now: t0, ExpiresAt: t0}); err == nil || errors.Is(err, idem.ErrLeaseLost) || idem.IsPermanent(err) {
		t.Fatalf("Complete with the store down = %v, want a store error", err)
	}
	if _, err := s.Get(ctx, k); err == nil || errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get with the store down = %v, want a store error", err)
	}
	if err := s.Migrate(ctx); err == nil {
		t.Fatal("Migrate with the store down succeeded")
	}
	g, err := idem.New(s, idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	res, err := g.Do(ctx, idem.Message{ID: "m", Payload: []byte("p")}, func(context.Context) ([]byte, error) {
		ran = true
		return nil, nil
	})
	var se *idem.StoreError
	if ran || !errors.As(err, &se) || res.Outcome != idem.OutcomeStoreError || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("Do with the store down: ran=%v outcome=%v err=%v action=%v", ran, res.Outcome, err, idem.Decide(res, err))
	}
	res, err = idem.DoTx(ctx, g, idem.Message{ID: "m", Payload: []byte("p")}, func(context.Context, *sql.Tx) ([]byte, error) {
		ran = true
		return nil, nil
	})
	if ran || err == nil || res.Outcome != idem.OutcomeStoreError || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("DoTx with the store down: ran=%v outcome=%v err=%v", ran, res.Outcome, err)
	}
}

// TestClaimsDuringSweep: workers claim expired (completed) records while a
// sweeper deletes them. Each claim either takes the expired record over or,
// if the sweep got there first, inserts a fresh one; none fails, none is
// lost, and the sweep never deletes a record a claim just renewed.
func TestClaimsDuringSweep(t *testing.T) {
	s := newStore(t, openDB(t, true, false))
	ctx := context.Background()
	const keys, workers = 300, 4
	key := func(i int) idem.Key { return idem.Key{Scope: "sweep", ID: fmt.Sprint("k-", i)} }
	for i := range keys {
		c, err := s.Claim(ctx, req(key(i), t0))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, idem.CompleteRequest{Key: key(i), Token: c.Record.Token, Now: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(2 * time.Hour)
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		errs  []error
		swept int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		for {
			n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 7})
			mu.Lock()
			swept += n
			if err != nil {
				errs = append(errs, fmt.Errorf("sweep: %w", err))
			}
			mu.Unlock()
			if n == 0 || err != nil {
				return
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := w; i < keys; i += workers {
				c, err := s.Claim(ctx, req(key(i), now))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if c.Outcome != idem.ClaimAcquired || c.Record.Attempts != 1 || c.Retaken {
					errs = append(errs, fmt.Errorf("%s: %v %+v", key(i), c.Outcome, c.Record))
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	for i := range keys {
		r, err := s.Get(ctx, key(i))
		if err != nil || r.State != idem.StateInProgress || !r.ExpiresAt.Equal(now.Add(time.Hour)) {
			t.Fatalf("%s after the race: %+v, %v", key(i), r, err)
		}
	}
	t.Logf("the sweep removed %d of %d expired records before they were reclaimed", swept, keys)
}
