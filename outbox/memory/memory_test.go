package outboxmemory_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem/outbox"
	outboxmemory "github.com/idemgo/idem/outbox/memory"
	"github.com/idemgo/idem/outbox/outboxtest"
)

func TestConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T, clock func() time.Time) outboxtest.Subject {
		s, err := outboxmemory.New(outboxmemory.Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		return outboxtest.Subject{
			Store: s,
			InTx: func(ctx context.Context, fn func(ctx context.Context, enqueue outboxtest.Enqueue) error) error {
				return s.InTx(ctx, func(ctx context.Context, tx *outboxmemory.Tx) error {
					return fn(ctx, func(ctx context.Context, msgs ...outbox.Message) error { return s.Enqueue(ctx, tx, msgs...) })
				})
			},
		}
	})
}
