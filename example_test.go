package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// A consumer charges each order once, however often the broker delivers it.
func ExampleGuard_Do() {
	g, err := idem.New(memory.New(), idem.Options{Scope: "billing"})
	if err != nil {
		panic(err)
	}
	charge := func(ctx context.Context) ([]byte, error) {
		// Downstream calls carry a key derived from the message's key, so
		// the payment provider deduplicates a retried call too.
		fmt.Println("charging with key", idem.DeriveKey(ctx, "charge")[:13])
		return []byte("receipt-42"), nil
	}
	order := idem.Message{ID: "order-42", Payload: []byte(`{"amount":100}`)}
	for range 3 { // the broker delivers it three times
		res, err := g.Do(context.Background(), order, charge)
		fmt.Println(res.Outcome, string(res.Value), idem.Decide(res, err))
	}

	// The same id with other content is a conflict, dead-lettered, never dropped.
	res, err := g.Do(context.Background(), idem.Message{ID: "order-42", Payload: []byte(`{"amount":999}`)}, charge)
	fmt.Println(res.Outcome, errors.Is(err, idem.ErrConflict), idem.Decide(res, err))
	// Output:
	// charging with key idem-75878f35
	// processed receipt-42 ack
	// duplicate receipt-42 ack
	// duplicate receipt-42 ack
	// conflict true dead_letter
}

// Keys come from the producer's message id by default; CloudEvents, headers,
// payload fields or your own function are a KeyFunc away.
func ExampleCloudEventsKey() {
	msg := idem.Message{Headers: map[string]string{
		"ce_specversion": "1.0", "ce_id": "A234-1234", "ce_source": "/shop/orders",
	}}
	id, err := idem.CloudEventsKey(msg)
	fmt.Println(id, err)
	// Output: /shop/orders|A234-1234 <nil>
}
