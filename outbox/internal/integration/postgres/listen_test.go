package outboxpostgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem/outbox"
	outboxpostgres "github.com/idemgo/idem/outbox/postgres"
)

// With an hour's poll interval, a relay still publishes at once: NOTIFY
// wakes it. Of two transactions committed within NotifyInterval, only the
// first NOTIFYs; the listener's second wake, NotifyInterval later, picks
// up the other.
func TestNotifyWakesTheRelay(t *testing.T) {
	s, pool := newStore(t, outboxpostgres.Options{NotifyInterval: 200 * time.Millisecond})
	var (
		mu  sync.Mutex
		got = map[string]time.Time{}
	)
	pub := outbox.PublisherFunc(func(_ context.Context, recs []outbox.Record) []error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range recs {
			got[r.ID] = time.Now()
		}
		return make([]error, len(recs))
	})
	idle := make(chan struct{}, 1)
	r, err := outbox.NewRelay(s, pub, outbox.RelayOptions{PollInterval: time.Hour, Lease: time.Hour,
		Observer: outbox.ObserverFunc(func(_ context.Context, e outbox.Event) {
			if e.Kind == outbox.EventLeaseAcquired {
				idle <- struct{}{}
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	<-idle
	time.Sleep(300 * time.Millisecond) // the first fetch found nothing; the listener is up
	enqueue := func(id string) time.Time {
		t.Helper()
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return s.Enqueue(ctx, tx, outbox.Message{ID: id, Destination: "d"})
		}); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	}
	published := func(id string) time.Time {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			at, ok := got[id]
			mu.Unlock()
			if ok {
				return at
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not published: the relay was not woken", id)
			}
			time.Sleep(2 * time.Millisecond) // polling interval
		}
	}
	first := enqueue("first")
	if d := published("first").Sub(first); d > 150*time.Millisecond {
		t.Errorf("first published %v after its commit", d)
	}
	// Published, and the relay idle again: second commits within
	// NotifyInterval of first's NOTIFY, so without one of its own.
	second := enqueue("second")
	d := published("second").Sub(second)
	if d > time.Second {
		t.Errorf("second published %v after its commit", d)
	}
	t.Logf("second, without a NOTIFY of its own, published %v after its commit", d)
}
