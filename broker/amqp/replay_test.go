package amqpidem

import (
	"errors"
	"maps"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
)

// TestReplayDedupHeader: a replay carries a deduplication header of its
// own, never the original's (which the deduplication plugin remembers and
// would drop it under), and the consumer reads it as the original: the
// same message-id (the key), the same headers, the same fingerprint.
func TestReplayDedupHeader(t *testing.T) {
	body := []byte(`{"order":7}`)
	fp, err := idem.PayloadFingerprint(idem.Message{Payload: body})
	if err != nil {
		t.Fatal(err)
	}
	dedup := idem.DedupID("order-7", fp)
	orig := amqp.Delivery{MessageId: "order-7", Body: body, ContentType: "application/json",
		Headers: amqp.Table{HeaderDedup: dedup, "tenant": "t1"}}
	deadLetter := func(d amqp.Delivery) amqp.Delivery {
		h := maps.Clone(d.Headers)
		h[HeaderRoutingKey], h[HeaderExchange], h[HeaderQueue] = "orders", "shop", "orders"
		h[idem.HeaderReason], h[HeaderReason], h["x-delivery-count"] = "permanent", "permanent", int64(3)
		d.Headers = h
		return d
	}
	asDelivery := func(p amqp.Publishing) amqp.Delivery {
		return amqp.Delivery{MessageId: p.MessageId, Body: p.Body, ContentType: p.ContentType, Headers: p.Headers}
	}

	tests := []struct {
		name string
		dl   amqp.Delivery
	}{
		{"the original's dead letter", deadLetter(orig)},
	}
	// The dead letter of a replay, replayed again: its header is taken
	// back to the original's, not grown.
	_, _, first, err := replayed(tests[0].dl)
	if err != nil {
		t.Fatal(err)
	}
	tests = append(tests, struct {
		name string
		dl   amqp.Delivery
	}{"a replay's dead letter", deadLetter(asDelivery(first))})

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, key, a, err := replayed(tt.dl)
			if err != nil || ex != "shop" || key != "orders" {
				t.Fatalf("replayed = %q, %q, %v; want shop, orders", ex, key, err)
			}
			_, _, b, err := replayed(tt.dl)
			if err != nil {
				t.Fatal(err)
			}
			got := HeaderString(a.Headers[HeaderDedup])
			if got == dedup || !strings.HasPrefix(got, dedup+"~replay-") || len(got) != len(dedup)+len("~replay-")+16 {
				t.Fatalf("replay's %s = %q, want %q, ~replay- and a nonce of its own", HeaderDedup, got, dedup)
			}
			if got == HeaderString(b.Headers[HeaderDedup]) {
				t.Fatalf("two replays share the %s %q", HeaderDedup, got)
			}
			if a.MessageId != "order-7" {
				t.Fatalf("replay's message-id %q, want the original's (the key)", a.MessageId)
			}
			want, seen := MessageOf(orig), MessageOf(asDelivery(a))
			if seen.ID != want.ID || !maps.Equal(seen.Headers, want.Headers) || string(seen.Payload) != string(want.Payload) {
				t.Fatalf("the guard sees the replay as %+v, the original as %+v", seen, want)
			}
			if f, _ := idem.PayloadFingerprint(seen); f != fp {
				t.Fatalf("replay's fingerprint %q, the original's %q", f, fp)
			}
		})
	}
}

func TestReplayWithoutDedupHeader(t *testing.T) {
	_, _, msg, err := replayed(amqp.Delivery{MessageId: "order-8", Headers: amqp.Table{HeaderRoutingKey: "orders", idem.HeaderReason: "conflict"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := msg.Headers[HeaderDedup]; ok {
		t.Fatalf("replay of a message published without %s got one: %v", HeaderDedup, msg.Headers)
	}
}

func TestReplayNotDeadLetter(t *testing.T) {
	if _, _, _, err := replayed(amqp.Delivery{MessageId: "order-9", Headers: amqp.Table{HeaderDedup: "order-9"}}); !errors.Is(err, ErrNotDeadLetter) {
		t.Fatalf("err = %v, want ErrNotDeadLetter", err)
	}
}
