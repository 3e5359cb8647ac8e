package demo

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
)

// doubleCharger applies every 50th charge twice, like a consumer whose dedup
// marker is not atomic with its effect.
type doubleCharger struct {
	ledger
	n atomic.Int64
}

func (d *doubleCharger) process(ctx context.Context, g *idem.Guard, msg idem.Message, o Order, fail bool) (idem.Result, error) {
	res, err := d.ledger.process(ctx, g, msg, o, fail)
	if err == nil && res.Outcome == idem.OutcomeProcessed && d.n.Add(1)%50 == 0 {
		if ml, ok := d.ledger.(*memLedger); ok {
			ml.apply(o)
		}
	}
	return res, err
}

// TestRunReportsABrokenLedger runs the whole demo with a ledger that
// double-charges and checks that the report says so and names the orders.
func TestRunReportsABrokenLedger(t *testing.T) {
	wrapLedger = func(l ledger) ledger { return &doubleCharger{ledger: l} }
	defer func() { wrapLedger = nil }()
	rep, err := Run(context.Background(), Config{Orders: 200, Store: "memory://", Mode: "two-phase", Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	if rep.InvariantOK {
		t.Fatalf("a double-charging ledger passed the invariant: %+v", rep)
	}
	if rep.EffectsApplied != 204 || !strings.Contains(strings.Join(rep.Offending, "\n"), "charged 2 times") {
		t.Fatalf("effects %d, offending %q", rep.EffectsApplied, rep.Offending)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{{Orders: -1}, {Consumers: 1000}, {CrashRate: 0.9}, {Mode: "fast"}, {On: AMQP}} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
