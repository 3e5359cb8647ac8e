package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
)

// A marker that reads in its insert's statement (the store marked the key
// lately: here in a transaction that rolled back) meets the marker of a
// transaction that has not committed: its insert waits for that
// transaction. When it commits, the row is not in the statement's snapshot
// (the read returns NULLs) and Mark asks again with the claim statement: a
// duplicate. When it rolls back, the insert goes in.
func TestMarkWaitsForAnOpenMarker(t *testing.T) {
	for _, tc := range []struct {
		name   string
		commit bool
		want   idem.ClaimOutcome
	}{
		{"the other commits", true, idem.ClaimDuplicate},
		{"the other rolls back", false, idem.ClaimAcquired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, postgres.Options{})
			ctx := context.Background()
			now := time.Now()
			req := idem.ClaimRequest{Key: idem.Key{Scope: "billing", ID: "contended"}, Fingerprint: "fp",
				Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
			errRollBack := errors.New("roll back")
			mark := func(hold func(tx pgx.Tx) error) (idem.Claim, error) {
				var c idem.Claim
				err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					var err error
					if c, err = s.Mark(ctx, tx, req); err != nil {
						return err
					}
					return hold(tx)
				})
				return c, err
			}
			if _, err := mark(func(pgx.Tx) error { return errRollBack }); !errors.Is(err, errRollBack) {
				t.Fatalf("first marker: %v", err)
			}

			holder := make(chan uint32)
			end := make(chan error)
			held := make(chan error, 1)
			go func() {
				c, err := mark(func(tx pgx.Tx) error {
					holder <- tx.Conn().PgConn().PID()
					return <-end
				})
				if err == nil && c.Outcome != idem.ClaimAcquired {
					err = fmt.Errorf("the holder's marker: %v, want acquired", c.Outcome)
				}
				held <- err
			}()
			pid := <-holder
			waiter := make(chan struct{})
			var (
				got    idem.Claim
				gotErr error
			)
			go func() {
				defer close(waiter)
				got, gotErr = mark(func(pgx.Tx) error { return nil })
			}()
			waitBlockedBy(t, pid)
			if tc.commit {
				end <- nil
			} else {
				end <- errRollBack
			}
			if err := <-held; err != nil && !errors.Is(err, errRollBack) {
				t.Fatal(err)
			}
			<-waiter
			if gotErr != nil || got.Outcome != tc.want {
				t.Fatalf("the waiting marker: %v, %v; want %v", got.Outcome, gotErr, tc.want)
			}
		})
	}
}

// waitBlockedBy returns once a session waits for a lock the backend pid
// holds.
func waitBlockedBy(t *testing.T, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		var n int
		if err := testPool(t).QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, int32(pid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session waited for backend %d within 30s", pid)
		}
		time.Sleep(pause) // polling the server's view of its locks; nothing else tells
	}
}
