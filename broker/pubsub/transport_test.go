package pubsubidem

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/store/memory"
)

// TestDeadLetterAttributes: a dead letter keeps the original's attributes,
// adds idem's and the position, and cuts long values to Pub/Sub's limit
// at a character boundary.
func TestDeadLetterAttributes(t *testing.T) {
	long := strings.Repeat("é", MaxAttributeValue) // 2 bytes each
	attempt := 3
	m := &Message{Message: &pubsub.Message{ID: "srv-1", Data: []byte("x"), OrderingKey: "k",
		PublishTime: time.Unix(1, 0), DeliveryAttempt: &attempt, Attributes: map[string]string{HeaderID: "order-1", "x-tenant": "acme"}}}
	a := deadLetterAttributes("projects/p/subscriptions/s", m, broker.DeadLetter{Reason: "permanent", Attempt: 3,
		Headers: map[string]string{idem.HeaderReason: "permanent", idem.HeaderError: long}})
	for k, want := range map[string]string{HeaderID: "order-1", "x-tenant": "acme", idem.HeaderReason: "permanent",
		HeaderSubscription: "projects/p/subscriptions/s", HeaderPosition: "srv-1", HeaderDeliveryAttempt: "3", HeaderOrderingKey: "k",
		HeaderPublishTime: "1970-01-01T00:00:01Z"} {
		if a[k] != want {
			t.Errorf("%s = %q, want %q", k, a[k], want)
		}
	}
	if e := a[idem.HeaderError]; len(e) > MaxAttributeValue || !utf8.ValidString(e) || len(e) < MaxAttributeValue-1 {
		t.Errorf("error attribute of %d bytes (valid UTF-8 %v), want cut to at most %d at a character boundary", len(e), utf8.ValidString(e), MaxAttributeValue)
	}
	if m.Attributes[idem.HeaderReason] != "" {
		t.Error("the original's attributes were changed")
	}
}

// TestMessageOf: the key is the Idem-Id attribute in any case, never the
// server's message id; the content type is the content-type attribute.
func TestMessageOf(t *testing.T) {
	im := MessageOf(&Message{Message: &pubsub.Message{ID: "srv-9", Data: []byte("{}"),
		Attributes: map[string]string{"idem-id": "order-9", "content-type": "application/json"}}})
	if im.ID != "order-9" || im.ContentType != "application/json" || string(im.Payload) != "{}" {
		t.Fatalf("MessageOf = %+v", im)
	}
	if im := MessageOf(&Message{Message: &pubsub.Message{ID: "srv-9"}}); im.ID != "" {
		t.Fatalf("without Idem-Id the id is %q, want none (the server id is no key)", im.ID)
	}
	d := (&transport{maxDeliveries: 5}).Delivery(&Message{Message: &pubsub.Message{}})
	if d.Attempt != 1 || d.Last {
		t.Fatalf("without a dead-letter policy: %+v, want attempt 1, not last", d)
	}
	five := 5
	if d := (&transport{maxDeliveries: 5}).Delivery(&Message{Message: &pubsub.Message{DeliveryAttempt: &five}}); d.Attempt != 5 || !d.Last {
		t.Fatalf("at MaxDeliveryAttempts: %+v, want attempt 5, last", d)
	}
}

// TestNewConsumerRefuses: misconfigurations are refused with
// idem.ErrInvalidOptions before any message is received.
func TestNewConsumerRefuses(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	h := Handle(func(context.Context, *Message) ([]byte, error) { return nil, nil })
	cl := &pubsub.Client{}
	noExt := cl.Subscriber("s")
	noExt.ReceiveSettings.MaxExtension = -1
	dl := cl.Publisher("dlq")
	for name, c := range map[string]struct {
		sub  *pubsub.Subscriber
		opts Options
	}{
		"nil subscriber":        {nil, Options{DeadLetter: dl}},
		"no dead letter":        {cl.Subscriber("s"), Options{}},
		"no deadline extension": {noExt, Options{DeadLetter: dl}},
		"negative option":       {cl.Subscriber("s"), Options{DeadLetter: dl, Concurrency: -1}},
	} {
		if _, err := NewConsumer(c.sub, g, h, c.opts); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
	tx := HandleTx(func(context.Context, *sql.Tx, *Message) ([]byte, error) { return nil, nil })
	if _, err := NewConsumer(cl.Subscriber("s"), g, tx, Options{DeadLetter: dl}); !errors.Is(err, idem.ErrNoTx) || !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("HandleTx on a store without transactions: %v, want ErrNoTx", err)
	}
}

// TestDeadLetterOf: a consumer's dead letter and one Pub/Sub forwarded
// read with the original's id; a message of the work topic is no dead
// letter.
func TestDeadLetterOf(t *testing.T) {
	tests := []struct {
		name    string
		attrs   map[string]string
		wantID  string
		wantErr error
	}{
		{"a consumer's", map[string]string{HeaderID: "order-1", idem.HeaderReason: "conflict", HeaderSubscription: "projects/p/subscriptions/s"}, "order-1", nil},
		{"forwarded by a dead-letter policy", map[string]string{HeaderID: "order-2", "CloudPubSubDeadLetterSourceSubscription": "s"}, "order-2", nil},
		{"a message of the work topic", map[string]string{HeaderID: "order-3"}, "order-3", ErrNotDeadLetter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DeadLetterOf(&pubsub.Message{ID: "srv-1", Data: []byte("x"), Attributes: tt.attrs})
			if !errors.Is(err, tt.wantErr) || m.ID != tt.wantID || string(m.Payload) != "x" || m.Header(idem.HeaderReason) != tt.attrs[idem.HeaderReason] {
				t.Fatalf("DeadLetterOf = %+v, %v; want ID %q, %v", m, err, tt.wantID, tt.wantErr)
			}
		})
	}
}
