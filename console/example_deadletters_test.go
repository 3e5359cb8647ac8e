package console_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"

	"github.com/idemgo/idem/console"
	"github.com/idemgo/idem/store/memory"
)

// ordersDLQ is a broker's dead-letter queue as the console takes it; an
// application adapts its broker's (idem console --broker does it for
// NATS, RabbitMQ, Kafka and Service Bus).
type ordersDLQ struct{ dls []console.BrokerDeadLetter }

func (q *ordersDLQ) Name() string { return "orders.dlq" }

func (q *ordersDLQ) List(_ context.Context, limit int) ([]console.BrokerDeadLetter, error) {
	n := len(q.dls)
	if limit > 0 {
		n = min(n, limit)
	}
	return slices.Clone(q.dls[:n]), nil
}

func (q *ordersDLQ) Replay(_ context.Context, ids []string, done func(console.BrokerDeadLetter, error)) error {
	q.dls = slices.DeleteFunc(q.dls, func(dl console.BrokerDeadLetter) bool {
		if !slices.Contains(ids, dl.ID) {
			return false
		}
		done(dl, nil) // a real queue publishes it back here
		return true
	})
	return nil
}

func ExampleDeadLetters() {
	q := &ordersDLQ{dls: []console.BrokerDeadLetter{{ID: "17", Reason: "permanent", Key: "billing/order-7", Error: "card declined"}}}
	c := console.New(memory.New(), console.Options{DeadLetters: []console.DeadLetters{q}}) // read-only: no Authorize
	defer c.Close()
	rr := httptest.NewRecorder()
	c.ServeHTTP(rr, httptest.NewRequest("GET", "http://localhost/idem/deadletters?reason=permanent", nil))
	fmt.Println(rr.Code, strings.Contains(rr.Body.String(), "card declined"))
	// Output: 200 true
}
