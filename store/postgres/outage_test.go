package postgres_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
)

// closedPort returns a local address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// A store whose server is down answers every call with an error (never a
// false outcome), and the guard turns it into a retry: the handler does not
// run and nothing would be acked.
func TestServerDown(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@"+closedPort(t)+"/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	k := idem.Key{Scope: "billing", ID: "order-1"}
	req := idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}

	if c, err := s.Claim(ctx, req); err == nil {
		t.Fatalf("Claim with the server down = %v, nil error", c.Outcome)
	}
	if _, err := s.ClaimBatch(ctx, []idem.ClaimRequest{req}); err == nil {
		t.Fatal("ClaimBatch with the server down succeeded")
	}
	for name, err := range map[string]error{
		"complete": s.Complete(ctx, idem.CompleteRequest{Key: k, Token: 1, Now: now, ExpiresAt: now.Add(time.Hour)}),
		"release":  s.Release(ctx, idem.ReleaseRequest{Key: k, Token: 1, Now: now}),
		"renew":    s.Renew(ctx, idem.RenewRequest{Key: k, Token: 1, Now: now, LeaseUntil: now.Add(time.Minute)}),
	} {
		// A lost lease would tell the guard to give up; a store error retries.
		if err == nil || errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("%s with the server down = %v, want a store error", name, err)
		}
	}
	if _, err := s.Get(ctx, k); err == nil || errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get with the server down = %v, want a store error, not ErrNotFound", err)
	}
	if _, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 10}); err == nil {
		t.Fatal("Sweep with the server down succeeded")
	}
	if err := s.Migrate(ctx); err == nil {
		t.Fatal("Migrate with the server down succeeded")
	}

	g, err := idem.New(s, idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	msg := idem.Message{ID: "order-1", Payload: []byte("charge 5")}
	ran := false
	res, err := g.Do(ctx, msg, func(context.Context) ([]byte, error) { ran = true; return nil, nil })
	var se *idem.StoreError
	if ran || !errors.As(err, &se) || res.Outcome != idem.OutcomeStoreError || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("Do with the server down: ran=%v outcome=%v action=%v err=%v", ran, res.Outcome, idem.Decide(res, err), err)
	}
	res, err = idem.DoTx(ctx, g, msg, func(context.Context, pgx.Tx) ([]byte, error) { ran = true; return nil, nil })
	if ran || err == nil || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("DoTx with the server down: ran=%v outcome=%v action=%v err=%v", ran, res.Outcome, idem.Decide(res, err), err)
	}
}
