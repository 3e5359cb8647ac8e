package integration_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/idemgo/idem"
	pubsubidem "github.com/idemgo/idem/broker/pubsub"
	"github.com/idemgo/idem/store/memory"
)

// downStore refuses every claim, as a store whose server refuses
// connections, while down; seen is closed once it has refused each of
// want keys.
type downStore struct {
	idem.Store
	down atomic.Bool
	want int
	seen chan struct{}

	mu      sync.Mutex
	refused map[string]bool
}

func (s *downStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if !s.down.Load() {
		return s.Store.Claim(ctx, req)
	}
	s.mu.Lock()
	if !s.refused[req.Key.ID] {
		s.refused[req.Key.ID] = true
		if len(s.refused) == s.want {
			close(s.seen)
		}
	}
	s.mu.Unlock()
	return idem.Claim{}, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// TestOutageKeepsHeldDeadlines: the messages a consumer holds through a
// store outage longer than two ack deadlines keep their deadlines alive,
// extended by the client while the engine holds them: pstest delivered
// each once, and once the store is back each is processed on its first
// delivery attempt (held: 0 of them came back with attempt 2).
//
// The messages stay within the client's MaxOutstandingMessages on
// purpose. pstest does not apply it: it pushes every message down the
// stream and starts its ack deadline, while the client, at its limit,
// never reads it; so on pstest a message beyond the limit comes back
// during a long outage, its DeliveryAttempt spent, where real Pub/Sub,
// which applies the limit on the server, would not have sent it. That is
// pstest's, not the consumer's: see the package doc's Tests section.
func TestOutageKeepsHeldDeadlines(t *testing.T) {
	t.Parallel()
	const n = 6
	srv := newServer(t)
	admin := newClient(t, srv)
	defer admin.Close()
	setup(t, admin, false, 5)
	store := &downStore{Store: memory.New(), want: n, seen: make(chan struct{}), refused: map[string]bool{}}
	store.down.Store(true)
	var handled atomic.Int32
	reports := consumerOn(t, srv, store, pubsubidem.Options{Concurrency: n,
		Backoff: idem.ExponentialBackoff(100*time.Millisecond, time.Second)}, func(s *pubsub.ReceiveSettings) { s.MaxOutstandingMessages = 2 * n },
		func(context.Context, *pubsubidem.Message) ([]byte, error) { handled.Add(1); return nil, nil })
	for i := range n {
		publishOne(t, admin, fmt.Sprintf("held-%d", i))
	}
	select {
	case <-store.seen:
	case <-time.After(60 * time.Second):
		t.Fatal("the consumer did not try every message within 60s")
	}
	time.Sleep(2*testDeadline + time.Second) // the outage itself: two ack deadlines and more
	for _, m := range srv.Messages() {
		if m.Topic == topicName && m.Deliveries != 1 {
			t.Errorf("message %s was delivered %d times during the outage: its deadline was not kept", m.ID, m.Deliveries)
		}
	}
	store.down.Store(false)
	for range n {
		if r := next(t, reports); r.Action != idem.ActionAck || r.Result.Outcome != idem.OutcomeProcessed || r.Attempt != 1 {
			t.Errorf("after the outage: %+v; want processed on attempt 1", r)
		}
	}
	if got := handled.Load(); got != n {
		t.Errorf("the handler ran %d times, want %d", got, n)
	}
}
