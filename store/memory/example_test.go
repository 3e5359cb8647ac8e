package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// Two-phase on the memory store: the handler runs once per key; a
// redelivery gets the recorded result, and the key reused with other
// content is a conflict.
func Example() {
	ctx := context.Background()
	store := memory.New() // nothing survives a restart: tests and single-process programs
	g, err := idem.New(store, idem.Options{Scope: "mailer"})
	if err != nil {
		panic(err)
	}
	send := func(msg idem.Message) {
		res, err := g.Do(ctx, msg, func(ctx context.Context) ([]byte, error) {
			return []byte("sent with key " + idem.DeriveKey(ctx, "send")), nil
		})
		fmt.Println(res.Outcome, idem.Decide(res, err))
	}
	send(idem.Message{ID: "evt-1", Payload: []byte(`{"to":"ada@example.com"}`)})
	send(idem.Message{ID: "evt-1", Payload: []byte(`{"to":"ada@example.com"}`)})
	send(idem.Message{ID: "evt-1", Payload: []byte(`{"to":"bob@example.com"}`)})
	// Output:
	// processed ack
	// duplicate ack
	// conflict dead_letter
}

// Sweep deletes the settled records whose retention has ended (never an
// in-progress one); idem.Sweeper calls it on a timer.
func ExampleStore_Sweep() {
	ctx := context.Background()
	store := memory.New()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	g, err := idem.New(store, idem.Options{Scope: "mailer", Retention: time.Hour, Clock: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	_, _ = g.Do(ctx, idem.Message{ID: "evt-1"}, func(ctx context.Context) ([]byte, error) { return nil, nil })
	n, err := store.Sweep(ctx, idem.SweepRequest{Now: now.Add(2 * time.Hour), Limit: 100})
	fmt.Println(n, err)
	// Output:
	// 1 <nil>
}
