package demo

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

func TestPlanIsDeterministic(t *testing.T) {
	a := plan(42, 500, 0.3, 0.02, 10)
	b := plan(42, 500, 0.3, 0.02, 10)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed planned two different streams")
	}
	if reflect.DeepEqual(a, plan(43, 500, 0.3, 0.02, 10)) {
		t.Fatal("different seeds planned the same stream")
	}
	ids := map[string]Order{}
	var retries, conflicts int
	for _, m := range a {
		switch {
		case m.Retry:
			retries++
			if ids[m.Order.ID] != m.Order {
				t.Errorf("retry of %s differs from (or precedes) the original", m.Order.ID)
			}
		case m.Conflict:
			conflicts++
			if o, ok := ids[m.Order.ID]; !ok || o == m.Order {
				t.Errorf("conflict on %s precedes the original or repeats it", m.Order.ID)
			}
		default:
			ids[m.Order.ID] = m.Order
		}
	}
	if len(ids) != 500 || retries == 0 || conflicts != 10 {
		t.Errorf("%d orders, %d retries, %d conflicts; want 500, some, 10", len(ids), retries, conflicts)
	}
}

func TestChaosIsDeterministicAndBounded(t *testing.T) {
	counts := map[fault]int{}
	for seq := uint64(1); seq <= 10_000; seq++ {
		f := chaos(9, seq, 1, 0.2)
		if f != chaos(9, seq, 1, 0.2) {
			t.Fatal("chaos is not a function of seed, sequence and delivery")
		}
		counts[f]++
		if g := chaos(9, seq, maxFaultyDelivery, 0.45); g != faultNone {
			t.Fatalf("fault %v injected on delivery %d: runs could last forever", g, maxFaultyDelivery)
		}
	}
	// 20% crashes, 10% lost acks, 10% handler failures, within a generous margin.
	for f, want := range map[fault]int{faultCrash: 2000, faultAckLost: 1000, faultHandler: 1000} {
		if got := counts[f]; got < want*8/10 || got > want*12/10 {
			t.Errorf("fault %d: %d of 10000 deliveries, want about %d", f, got, want)
		}
	}
}

// TestVerifyCatchesBrokenLedgers feeds the checker ledgers that break the
// invariant in each way it knows, so a passing demo means something.
func TestVerifyCatchesBrokenLedgers(t *testing.T) {
	a := Order{ID: "order-1", Account: "acct-1", Amount: 100}
	a2 := Order{ID: "order-1", Account: "acct-1", Amount: 150} // reuses a's id
	b := Order{ID: "order-2", Account: "acct-2", Amount: 200}
	msgs := []message{{Order: a}, {Order: b}, {Order: a, Retry: true}, {Order: a2, Conflict: true}}
	for _, tc := range []struct {
		name    string
		applied []Order
		dead    map[uint64]string
		balance map[string]int64 // overrides the ledger's own balances
		want    string           // in the offending lines; "" when the invariant holds
	}{
		{"exactly once", []Order{a, b}, map[uint64]string{4: "conflict"}, nil, ""},
		{"conflict won the race", []Order{a2, b}, map[uint64]string{1: "conflict", 3: "conflict"}, nil, ""},
		{"double charge", []Order{a, b, a}, map[uint64]string{4: "conflict"}, nil, "order-1: charged 2 times"},
		{"lost order", []Order{a}, map[uint64]string{4: "conflict"}, nil, "order-2: lost"},
		{"conflict dropped", []Order{a, b}, nil, nil, "neither charged nor dead-lettered"},
		{"invented charge", []Order{a, b, {ID: "order-9", Account: "acct-1", Amount: 1}}, map[uint64]string{4: "conflict"}, nil, "never published"},
		{"bad balance", []Order{a, b}, map[uint64]string{4: "conflict"}, map[string]int64{"acct-1": 100, "acct-2": 201}, "account acct-2: balance 201"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newMemLedger()
			for _, o := range tc.applied {
				l.apply(o)
			}
			if tc.balance != nil {
				l.bal = tc.balance
			}
			r := &runner{ledger: l, naive: newMemLedger(), idem: newSide("idem"), naiveS: newSide("naive")}
			for seq, reason := range tc.dead {
				r.idem.settle(seq, reason)
			}
			rep := &Report{Unique: 2}
			if err := r.verify(context.Background(), rep, msgs); err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if !rep.InvariantOK {
					t.Fatalf("invariant reported broken: %v", rep.Offending)
				}
				return
			}
			if rep.InvariantOK {
				t.Fatalf("invariant reported holding; want %q", tc.want)
			}
			if !strings.Contains(strings.Join(rep.Offending, "\n"), tc.want) {
				t.Errorf("offending %q lacks %q", rep.Offending, tc.want)
			}
			var sb strings.Builder
			if err := rep.WriteTable(&sb); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(sb.String(), "Offending orders:") || !strings.Contains(sb.String(), tc.want) {
				t.Errorf("table does not list the offending orders:\n%s", sb.String())
			}
		})
	}
}

// A conflict whose new content won the race dead-letters the original and
// its retry: two messages, one conflicting id. The report counts the id.
func TestVerifyCountsConflictingIDs(t *testing.T) {
	a := Order{ID: "order-1", Account: "acct-1", Amount: 100}
	a2 := Order{ID: "order-1", Account: "acct-1", Amount: 150}
	msgs := []message{{Order: a}, {Order: a, Retry: true}, {Order: a2, Conflict: true}}
	l := newMemLedger()
	l.apply(a2)
	r := &runner{ledger: l, naive: newMemLedger(), idem: newSide("idem"), naiveS: newSide("naive")}
	r.idem.settle(1, "conflict")
	r.idem.settle(2, "conflict")
	rep := &Report{Unique: 1, ConflictingSent: 1}
	if err := r.verify(context.Background(), rep, msgs); err != nil {
		t.Fatal(err)
	}
	if !rep.InvariantOK || rep.Conflicts != 1 || rep.ConflictDeadLetters != 2 {
		t.Fatalf("invariant %v, conflicts %d, dead letters %d; want true, 1, 2", rep.InvariantOK, rep.Conflicts, rep.ConflictDeadLetters)
	}
	var sb strings.Builder
	if err := rep.WriteTable(&sb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "of 1 id reused with other content; 2 messages") {
		t.Errorf("table:\n%s", sb.String())
	}
}
