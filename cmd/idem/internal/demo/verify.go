package demo

import (
	"context"
	"fmt"
	"sort"
)

// maxOffending bounds the offending orders listed in a report.
const maxOffending = 50

// verify checks the exactly-once invariant on idem's ledger and fills in the
// report: every order charged exactly once, with one of the versions the
// producer sent; every other version of a reused id dead-lettered as a
// conflict; no charge for an order nobody sent; each account's balance equal
// to the sum of its orders' charges. It also measures the naive ledger.
func (r *runner) verify(ctx context.Context, rep *Report, msgs []message) error {
	charges, err := r.ledger.charges(ctx)
	if err != nil {
		return fmt.Errorf("read idem's ledger: %w", err)
	}
	balances, err := r.ledger.balances(ctx)
	if err != nil {
		return fmt.Errorf("read idem's ledger balances: %w", err)
	}
	rep.EffectsApplied = len(charges)
	r.idem.mu.Lock()
	dead := make(map[uint64]string, len(r.idem.dead))
	for k, v := range r.idem.dead {
		dead[k] = v
	}
	r.idem.mu.Unlock()
	// A conflict is an order id sent with two contents; whichever version
	// is charged first, the other's messages (with their producer retries)
	// are dead-lettered, so messages outnumber conflicts.
	conflicted := map[string]bool{}
	for seq, reason := range dead {
		if reason != "conflict" {
			continue
		}
		rep.ConflictDeadLetters++
		if seq >= 1 && seq <= uint64(len(msgs)) {
			conflicted[msgs[seq-1].Order.ID] = true
		}
	}
	rep.Conflicts = len(conflicted)

	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	sent := map[string]map[Order]bool{} // order id -> versions sent
	for _, m := range msgs {
		if sent[m.Order.ID] == nil {
			sent[m.Order.ID] = map[Order]bool{}
		}
		sent[m.Order.ID][m.Order] = true
	}
	applied := map[string][]Order{}
	for _, c := range charges {
		applied[c.ID] = append(applied[c.ID], c)
	}
	ids := make([]string, 0, len(sent))
	for id := range sent {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	want := map[string]int64{}
	for _, id := range ids {
		got := applied[id]
		switch {
		case len(got) == 0:
			add("%s: lost (never charged)", id)
			continue
		case len(got) > 1:
			add("%s: charged %d times", id, len(got))
		case !sent[id][got[0]]:
			add("%s: charged %d to %s, which the producer never sent", id, got[0].Amount, got[0].Account)
		}
		want[got[0].Account] += got[0].Amount
	}
	for id := range applied {
		if sent[id] == nil {
			add("%s: charged but never published", id)
		}
	}
	for i, m := range msgs {
		if m.Retry && r.retriesDropped {
			continue // the broker dropped it: no consumer saw it
		}
		got := applied[m.Order.ID]
		if len(got) == 1 && got[0] != m.Order && dead[uint64(i+1)] != "conflict" {
			add("%s: version with amount %d (message %d) neither charged nor dead-lettered as a conflict",
				m.Order.ID, m.Order.Amount, i+1)
		}
	}
	accts := map[string]bool{}
	for a := range want {
		accts[a] = true
	}
	for a := range balances {
		accts[a] = true
	}
	for _, a := range sortedKeys(accts) {
		if balances[a] != want[a] {
			add("account %s: balance %d, its charges sum to %d", a, balances[a], want[a])
		}
	}
	if len(bad) > maxOffending {
		bad = append(bad[:maxOffending], fmt.Sprintf("... and %d more", len(bad)-maxOffending))
	}
	rep.Offending = bad
	rep.InvariantOK = len(bad) == 0 && rep.EffectsApplied == rep.Unique

	// The naive side: what over-charging at-least-once delivery costs.
	naive, _ := r.naive.charges(ctx)
	rep.NaiveEffectsApplied = len(naive)
	count := map[string]int{}
	var naiveTotal, rightTotal int64
	for _, c := range naive {
		count[c.ID]++
		naiveTotal += c.Amount
	}
	for _, n := range count {
		if n > 1 {
			rep.NaiveOvercharged++
		}
	}
	for _, v := range want {
		rightTotal += v
	}
	rep.NaiveBalanceError = naiveTotal - rightTotal
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
