package outboxtest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
)

// RunDoTx checks Enqueue inside idem.DoTx on a guard whose store has a
// transactional inbox over Tx (store/postgres with pgx.Tx, store/sqlite or
// store/mysql with *sql.Tx), the outbox store s on the same database: the
// inbox marker, the business writes and the messages commit together; a
// handler whose transaction rolls back and runs again for the same inbound
// message enqueues the same ids, once; a redelivery after the commit is a
// duplicate at the inbox and enqueues nothing; a rejected message rolls the
// whole transaction back and is permanent (the inbound message is
// dead-lettered, not retried).
func RunDoTx[Tx any](t *testing.T, g *idem.Guard, s outbox.Store, enqueue func(ctx context.Context, tx Tx, msgs ...outbox.Message) error) {
	t.Helper()
	in, ok := s.(outbox.Inspector)
	if !ok {
		t.Fatalf("%T does not implement outbox.Inspector", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	order := idem.Message{ID: "order-7", Payload: []byte(`{"amount":42}`)}
	handler := func(fail error) idem.TxHandler[Tx] {
		return func(ctx context.Context, tx Tx) ([]byte, error) {
			if err := enqueue(ctx, tx,
				outbox.Message{Destination: "billing.charged", OrderingKey: "order-7", Payload: []byte("charged")},
				outbox.Message{Destination: "mail.receipt", Payload: []byte("receipt")},
			); err != nil {
				return nil, err
			}
			return nil, fail
		}
	}
	list := func() []outbox.Record {
		t.Helper()
		recs, err := in.List(ctx, outbox.ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	// The first run fails after enqueueing: nothing of it commits.
	boom := errors.New("the charge failed")
	if _, err := idem.DoTx(ctx, g, order, handler(boom)); !errors.Is(err, boom) {
		t.Fatalf("DoTx: %v, want the handler's error", err)
	}
	if recs := list(); len(recs) != 0 {
		t.Fatalf("a rolled back handler left %d messages", len(recs))
	}
	// The redelivery runs it again and commits: the ids are those its
	// first run derived.
	res, err := idem.DoTx(ctx, g, order, handler(nil))
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("DoTx: %v, %v", res.Outcome, err)
	}
	key := idem.Key{Scope: g.Options().Scope, ID: order.ID}
	want := []string{key.Derive("outbox:billing.charged#0"), key.Derive("outbox:mail.receipt#0")}
	if got := list(); !slices.Equal(ids(got), want) {
		t.Fatalf("messages %v, want the ids derived from the inbound key %v", ids(got), want)
	}
	// Redelivered after the commit: a duplicate, no second message.
	res, err = idem.DoTx(ctx, g, order, handler(nil))
	if err != nil || res.Outcome != idem.OutcomeDuplicate {
		t.Fatalf("redelivery: %v, %v, want a duplicate", res.Outcome, err)
	}
	if got := list(); len(got) != 2 {
		t.Fatalf("%d messages after the redelivery, want 2", len(got))
	}
	// An invalid message rolls the handler back and is permanent.
	bad := idem.Message{ID: "order-8", Payload: []byte("x")}
	_, err = idem.DoTx(ctx, g, bad, func(ctx context.Context, tx Tx) ([]byte, error) {
		return nil, enqueue(ctx, tx, outbox.Message{Destination: "", Payload: []byte("no destination")})
	})
	if !errors.Is(err, outbox.ErrNoDestination) || !idem.IsPermanent(err) || idem.Decide(idem.Result{Outcome: idem.OutcomePermanent}, err) != idem.ActionDeadLetter {
		t.Fatalf("an invalid message: %v, want ErrNoDestination, permanent", err)
	}
	if got := list(); len(got) != 2 {
		t.Fatalf("%d messages after the invalid one, want 2", len(got))
	}
}
