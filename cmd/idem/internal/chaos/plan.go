package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// Order is the payload the producer sends and the consumers charge.
type Order struct {
	Order   string `json:"order"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// Kinds of planned message.
const (
	kindOrder     = "order"    // a unique order, first send
	kindRetry     = "retry"    // the same order again: a producer retry after a lost ack
	kindConflict  = "conflict" // an order id reused with other content
	kindBadData   = "bad_data" // poison: a payload that does not decode
	kindNoKey     = "no_key"   // poison: a valid order without an id header
	accountsCount = 50
)

// planned is one message the producer publishes.
type planned struct {
	Kind  string
	ID    string // the Idem-Id header; "" for kindNoKey
	Order Order
	Data  []byte
}

// Plan is what the producer sends, drawn from the seed.
type Plan struct {
	Msgs []planned
	// Contents holds, per order id, every content published under it (the
	// first is the original; a second one is a conflict).
	Contents map[string][]Order
	Poison   map[string]string // order id of a poison message -> the dead-letter reason idem gives it
	// Fails holds, per order id, how many times the consumers' handler
	// fails it before it charges (failAlways: every time): the handler
	// failures the harness injects, which alone may end an order
	// dead-lettered (max_deliver).
	Fails map[string]int
}

// Injected handler failures: about 1% of the orders fail their first
// flakyFails handler runs, and, with a delivery limit, 0.3% fail every run
// and must end dead-lettered after the limit's failures.
const (
	flakyFails = 2
	failAlways = -1
)

// NewPlan draws the messages for n orders: about 10% re-sent as producer
// retries, 1% of ids reused with other content, 0.5% undecodable and 0.5%
// without a key. Re-sends and reuses come later in the stream than their
// original, at a random distance. About 1.3% of the orders sent with one
// content are drawn for handler failures (Fails): 1% flaky, 0.3% failing
// every run (dropped by noFailAlways when there is no delivery limit).
func NewPlan(seed uint64, n int) *Plan {
	rng := rand.New(rand.NewPCG(seed, 0x0dde))
	p := &Plan{Contents: map[string][]Order{}, Poison: map[string]string{}, Fails: map[string]int{}}
	var late []planned // inserted at random later positions
	for i := range n {
		o := Order{Order: fmt.Sprintf("o-%06d", i), Account: fmt.Sprintf("a-%02d", rng.IntN(accountsCount)), Amount: 1 + rng.Int64N(10000)}
		data, _ := json.Marshal(o)
		m := planned{Kind: kindOrder, ID: o.Order, Order: o, Data: data}
		p.Msgs = append(p.Msgs, m)
		p.Contents[o.Order] = append(p.Contents[o.Order], o)
		switch r := rng.Float64(); {
		case r < 0.10:
			m.Kind = kindRetry
			late = append(late, m)
		case r < 0.11:
			c := o
			c.Amount = o.Amount + 1 + rng.Int64N(100)
			cd, _ := json.Marshal(c)
			late = append(late, planned{Kind: kindConflict, ID: o.Order, Order: c, Data: cd})
			p.Contents[o.Order] = append(p.Contents[o.Order], c)
		case r < 0.115:
			id := fmt.Sprintf("bad-%06d", i)
			p.Msgs = append(p.Msgs, planned{Kind: kindBadData, ID: id, Order: Order{Order: id}, Data: []byte(`{"order":"` + id + `","amount":`)})
			p.Poison[id] = "permanent"
		case r < 0.12:
			no := Order{Order: fmt.Sprintf("nokey-%06d", i), Account: o.Account, Amount: 1 + rng.Int64N(10000)}
			nd, _ := json.Marshal(no)
			p.Msgs = append(p.Msgs, planned{Kind: kindNoKey, Order: no, Data: nd})
			p.Poison[no.Order] = "no_key"
		}
	}
	for _, m := range late {
		// after the original, somewhere in the rest of the stream
		first := 0
		for i, o := range p.Msgs {
			if o.ID == m.ID {
				first = i
				break
			}
		}
		at := first + 1 + rng.IntN(len(p.Msgs)-first)
		p.Msgs = append(p.Msgs[:at], append([]planned{m}, p.Msgs[at:]...)...)
	}
	// A stream of its own, so the failures leave the messages as they were
	// drawn; conflicts are left out (their loser must be dead-lettered as a
	// conflict, not for a failure).
	frng := rand.New(rand.NewPCG(seed, 0xfa11))
	for i := range n {
		id := fmt.Sprintf("o-%06d", i)
		switch r := frng.Float64(); {
		case len(p.Contents[id]) > 1:
		case r < 0.010:
			p.Fails[id] = flakyFails
		case r < 0.013:
			p.Fails[id] = failAlways
		}
	}
	return p
}

// noFailAlways removes the orders the handler fails every time: without a
// delivery limit their retries would take minutes (100 deliveries on
// NATS and RabbitMQ) or never end (Kafka retries forever).
func (p *Plan) noFailAlways() {
	for id, n := range p.Fails {
		if n == failAlways {
			delete(p.Fails, id)
		}
	}
}

// Unique is the number of unique order ids (each must be applied once).
func (p *Plan) Unique() int { return len(p.Contents) }
