package servicebus_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/store/memory"
)

// TestReplayInsideDuplicateDetection: on a queue with duplicate detection,
// whose window remembers the original's MessageID, a dead letter replayed
// at once, and the dead letter of that replay replayed again, reach the
// consumer under the original's key, whatever the original's MessageID:
// Send's (the key in Idem-Id), a plain one (the key), one too long to
// take the replay's mark within 128 characters, in ASCII or not. The
// replays' MessageIDs are their own and within Service Bus's limit;
// MessageOf shows the consumer the original's headers only.
func TestReplayInsideDuplicateDetection(t *testing.T) {
	tests := []struct {
		name string
		send func(ctx context.Context, s *azservicebus.Sender) error
		key  string
	}{
		{"sent by Send", func(ctx context.Context, s *azservicebus.Sender) error {
			return servicebus.Send(ctx, s, "order-1", &azservicebus.Message{Body: []byte(`{"amount":10}`)})
		}, "order-1"},
		{"plain MessageID", plainSend("order-2"), "order-2"},
		{"MessageID too long for the mark", plainSend(strings.Repeat("x", 120)), strings.Repeat("x", 120)},
		// Cut inside a character: an ASCII start of 20 bytes, then 44 é of
		// two bytes each (idem.Key.String, which the dead letter's Idem-Key
		// uses, cuts such an id at byte offsets 7, 19 and 60, which the
		// start keeps whole).
		{"MessageID too long, multi-byte", plainSend(longMultiByte), longMultiByte},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, client, s := dedupQueue(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := tc.send(ctx, s); err != nil {
				t.Fatal(err)
			}
			g, err := servicebus.NewGuard(memory.New(), servicebus.EntityPath("orders"), idem.Options{})
			if err != nil {
				t.Fatal(err)
			}
			type delivery struct {
				messageID string
				msg       idem.Message
			}
			var (
				mu    sync.Mutex
				fails = 2 // the original and the first replay fail
			)
			handled := make(chan delivery, 3)
			reports := make(chan broker.Report, 3)
			r, err := client.NewReceiverForQueue("orders", nil)
			if err != nil {
				t.Fatal(err)
			}
			c, err := servicebus.NewConsumer(r, g, servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
				handled <- delivery{m.MessageID, servicebus.MessageOf(m)}
				mu.Lock()
				defer mu.Unlock()
				if fails > 0 {
					fails--
					return nil, idem.Permanent(errors.New("account frozen"))
				}
				return nil, nil
			}), servicebus.Options{EntityPath: "orders", Hooks: broker.Hooks[*azservicebus.ReceivedMessage]{
				AfterSettle: func(_ context.Context, _ *azservicebus.ReceivedMessage, r broker.Report) { reports <- r },
			}})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(runCtx) }()
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			dlq, err := client.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
			if err != nil {
				t.Fatal(err)
			}
			original := within(t, handled, "the original handled")
			for i, want := range []idem.Action{idem.ActionDeadLetter, idem.ActionDeadLetter, idem.ActionAck} {
				if r := within(t, reports, "a settlement"); r.Action != want || r.Result.Key.ID != tc.key || r.BrokerErr != nil {
					t.Fatalf("delivery %d: %v of key %q (%v), want %v of %q", i, r.Action, r.Result.Key.ID, r.BrokerErr, want, tc.key)
				}
				if want == idem.ActionAck {
					break
				}
				msgs, err := dlq.ReceiveMessages(ctx, 1, nil)
				if err != nil || len(msgs) != 1 {
					t.Fatalf("dead-letter queue: %v, %d messages", err, len(msgs))
				}
				if err := servicebus.Replay(ctx, s, msgs[0]); err != nil {
					t.Fatal(err)
				}
				if err := dlq.CompleteMessage(ctx, msgs[0], nil); err != nil {
					t.Fatal(err)
				}
				replay := within(t, handled, "the replay handled")
				if id := replay.messageID; id == original.messageID || len(id) > 128 || !utf8.ValidString(id) || !strings.Contains(id, "~replay-") {
					t.Errorf("replay %d: MessageID %q, want one of its own (the original's was %q) within 128 bytes", i+1, id, original.messageID)
				}
				if replay.msg.ID != original.msg.ID || len(replay.msg.Headers) != len(original.msg.Headers) {
					t.Errorf("replay %d reads as %+v, want as the original %+v", i+1, replay.msg, original.msg)
				}
			}
		})
	}
}

// within receives from ch, failing t after 30 seconds without a value.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing within 30s", what)
		panic("unreachable")
	}
}

var longMultiByte = strings.Repeat("o", 20) + strings.Repeat("é", 44)

// plainSend sends a message with MessageID id and no Idem-Id, as a
// producer that does not use Send does.
func plainSend(id string) func(ctx context.Context, s *azservicebus.Sender) error {
	return func(ctx context.Context, s *azservicebus.Sender) error {
		return s.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte(`{"amount":20}`)}, nil)
	}
}
