package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/mysql"
)

// businessTable creates a table of charges WITHOUT a unique constraint, so
// only the inbox stands between a redelivery and a second charge.
func businessTable(t testing.TB, db *sql.DB, s *mysql.Store) string {
	t.Helper()
	name := "`" + s.Table() + "_charges`"
	if _, err := db.Exec("CREATE TABLE " + name + " (order_id VARBINARY(64) NOT NULL, amount BIGINT NOT NULL, KEY (order_id)) ENGINE = InnoDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + name) })
	return name
}

// TestInboxBusinessTable: 8 consumers receive every one of 40 orders (each
// delivered to all of them, in different orders, at once); each order is
// charged exactly once, and every other delivery is a duplicate with the
// recorded result.
func TestInboxBusinessTable(t *testing.T) {
	db := openDB(t, true, false)
	s := newStore(t, db)
	charges := businessTable(t, db, s)
	g, err := idem.New(s, idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	const consumers, orders = 8, 40
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		outcomes = map[idem.Outcome]int{}
		errs     []error
	)
	for c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range orders {
				id := fmt.Sprintf("order-%02d", (i+c*5)%orders)
				msg := idem.Message{ID: id, Payload: []byte("amount=10")}
				res, err := idem.DoTx(context.Background(), g, msg, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
					if _, err := tx.ExecContext(ctx, "INSERT INTO "+charges+" (order_id, amount) VALUES (?, 10)", id); err != nil {
						return nil, err
					}
					return []byte("charged " + id), nil
				})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if string(res.Value) != "charged "+id {
					errs = append(errs, fmt.Errorf("%s: result %q", id, res.Value))
				}
				outcomes[res.Outcome]++
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d deliveries failed, first: %v", len(errs), errs[0])
	}
	if outcomes[idem.OutcomeProcessed] != orders || outcomes[idem.OutcomeDuplicate] != orders*(consumers-1) {
		t.Fatalf("outcomes %v, want %d processed and %d duplicates", outcomes, orders, orders*(consumers-1))
	}
	var rows, distinct int
	if err := db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT order_id) FROM "+charges).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != orders || distinct != orders {
		t.Fatalf("%d charges for %d distinct orders, want %d each", rows, distinct, orders)
	}

	// A failing handler rolls back its charge and leaves no marker; the
	// redelivery charges once.
	boom := errors.New("card declined, try later")
	msg := idem.Message{ID: "order-x", Payload: []byte("amount=5")}
	charge := func(fail error) (idem.Result, error) {
		return idem.DoTx(context.Background(), g, msg, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+charges+" (order_id, amount) VALUES ('order-x', 5)"); err != nil {
				return nil, err
			}
			return nil, fail
		})
	}
	if _, err := charge(boom); !errors.Is(err, boom) {
		t.Fatalf("failing handler: %v", err)
	}
	if res, err := charge(nil); err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("redelivery after rollback: %v %v", res.Outcome, err)
	}
	if res, err := charge(nil); err != nil || res.Outcome != idem.OutcomeDuplicate {
		t.Fatalf("second redelivery: %v %v", res.Outcome, err)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM " + charges + " WHERE order_id = 'order-x'").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("order-x charged %d times, %v", rows, err)
	}
}

// TestMarkLocksNoGaps: a REPEATABLE READ transaction holding markers (one
// found as a duplicate, one freshly inserted) must not block another
// transaction marking or claiming keys right next to them. The second pool
// waits at most 1s for any lock (innodb_lock_wait_timeout), so a gap lock
// shows up as error 1205; the same-key control proves that a real conflict
// does show up.
func TestMarkLocksNoGaps(t *testing.T) {
	db := openDB(t, true, false)
	s := newStore(t, db)
	impatient := openImpatient(t)
	s2 := sameTable(t, impatient, s)
	ctx := context.Background()
	k := func(id string) idem.Key { return idem.Key{Scope: "inbox", ID: id} }
	for _, id := range []string{"k-10", "k-30", "k-50"} {
		if err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := s.Mark(ctx, tx, req(k(id), t0))
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if c, err := s.Mark(ctx, holder, req(k("k-30"), t0)); err != nil || c.Outcome != idem.ClaimDuplicate {
		t.Fatalf("holder Mark(k-30) = %v, %v", c.Outcome, err)
	}
	if c, err := s.Mark(ctx, holder, req(k("k-20"), t0)); err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("holder Mark(k-20) = %v, %v", c.Outcome, err)
	}

	other, err := impatient.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	for _, id := range []string{"k-15", "k-19", "k-21", "k-25", "k-29", "k-31", "k-40", "k-10", "k-50"} {
		if _, err := s2.Mark(ctx, other, req(k(id), t0)); err != nil {
			t.Fatalf("Mark(%s) next to the holder's markers: %v", id, err)
		}
	}
	for _, id := range []string{"k-16", "k-24", "k-35"} {
		if _, err := s2.Claim(ctx, req(k(id), t0)); err != nil {
			t.Fatalf("Claim(%s) next to the holder's markers: %v", id, err)
		}
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	// Control: the same key does wait for the holder (and times out here).
	for _, id := range []string{"k-30", "k-20"} {
		tx, err := impatient.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s2.Mark(ctx, tx, req(k(id), t0))
		tx.Rollback()
		var me *gomysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1205 {
			t.Fatalf("Mark(%s) held by another transaction = %v, want a lock wait timeout", id, err)
		}
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestMarkSeesCommittedUnderRR: a REPEATABLE READ transaction whose snapshot
// was taken before another transaction committed a marker must still find
// that marker (a duplicate), not its stale snapshot's "absent". This is why
// Mark reads with a locking read.
func TestMarkSeesCommittedUnderRR(t *testing.T) {
	db := openDB(t, true, false)
	s := newStore(t, db)
	ctx := context.Background()
	k := idem.Key{Scope: "inbox", ID: "late"}
	late, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback()
	var n int
	if err := late.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+s.Table()+"`").Scan(&n); err != nil || n != 0 {
		t.Fatalf("snapshot read: %d, %v", n, err)
	}
	if err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		c, err := s.Mark(ctx, tx, req(k, t0))
		if err == nil && c.Outcome != idem.ClaimAcquired {
			err = fmt.Errorf("first Mark = %v", c.Outcome)
		}
		if err == nil {
			err = s.SaveResult(ctx, tx, k, []byte("first"))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c, err := s.Mark(ctx, late, req(k, t0))
	if err != nil || c.Outcome != idem.ClaimDuplicate || string(c.Record.Result) != "first" {
		t.Fatalf("Mark in the older snapshot = %v %q, %v; want the committed marker as a duplicate", c.Outcome, c.Record.Result, err)
	}
}
