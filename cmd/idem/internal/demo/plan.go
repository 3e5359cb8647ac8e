package demo

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
)

// Order is what the producer publishes: one charge to an account.
type Order struct {
	ID      string `json:"order_id"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"` // cents
}

// message is one planned publication: an order, a producer retry of one
// (same id, same content) or a conflicting reuse of an id (same id, other
// content).
type message struct {
	Order    Order
	Retry    bool
	Conflict bool
}

func (m message) payload() []byte {
	b, _ := json.Marshal(m.Order)
	return b
}

// plan builds the producer's stream from the seed: every order once, a
// dupRate share of them re-sent once or twice a little later, and
// conflictRate of them (at least one) followed later by a message reusing the
// id with another amount.
func plan(seed uint64, orders int, dupRate, conflictRate float64, accounts int) []message {
	rng := rand.New(rand.NewPCG(seed, 0x1de3))
	type placed struct {
		pos float64
		m   message
	}
	var out []placed
	base := make([]Order, orders)
	for i := range orders {
		o := Order{
			ID:      fmt.Sprintf("order-%06d", i+1),
			Account: fmt.Sprintf("acct-%02d", rng.IntN(accounts)+1),
			Amount:  int64(100 + rng.IntN(99_900)),
		}
		base[i] = o
		out = append(out, placed{float64(i), message{Order: o}})
		if rng.Float64() < dupRate {
			for range 1 + rng.IntN(2) {
				// A producer retry lands shortly after the original, often
				// while it is still being processed.
				out = append(out, placed{float64(i) + 0.5 + rng.Float64()*40, message{Order: o, Retry: true}})
			}
		}
	}
	nConflicts := 0
	if conflictRate > 0 && orders > 0 {
		nConflicts = max(1, int(float64(orders)*conflictRate+0.5))
	}
	for _, i := range rng.Perm(orders)[:min(nConflicts, orders)] {
		o := base[i]
		o.Amount += int64(1 + rng.IntN(5_000))
		out = append(out, placed{float64(i) + 1 + rng.Float64()*60, message{Order: o, Conflict: true}})
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].pos < out[b].pos })
	msgs := make([]message, len(out))
	for i, p := range out {
		msgs[i] = p.m
	}
	return msgs
}
