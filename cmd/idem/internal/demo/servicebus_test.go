package demo

import (
	"context"
	"testing"
)

// TestRunServiceBus runs the demo on the in-process Service Bus, in both
// modes, under heavy chaos: the invariant holds, the topic's duplicate
// detection dropped every producer retry (so idem's duplicates are
// redeliveries of crashed consumers' messages), and the naive consumer,
// which the broker's dedup does not help with redeliveries, over-charges.
func TestRunServiceBus(t *testing.T) {
	for _, tc := range []struct{ store, mode string }{{"", "auto"}, {"memory://", "two-phase"}} {
		t.Run(tc.mode, func(t *testing.T) {
			rep, err := Run(context.Background(), Config{Broker: BrokerServiceBus, Store: tc.store, Mode: tc.mode,
				Orders: 300, Consumers: 4, CrashRate: 0.2, DupRate: 0.5, ConflictRate: 0.02, Seed: 5})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.InvariantOK {
				t.Fatalf("invariant broken: %v", rep.Offending)
			}
			if rep.EffectsApplied != 300 || rep.Retries == 0 || rep.BrokerDropped != rep.Retries {
				t.Fatalf("effects %d; %d producer retries, %d dropped by the broker", rep.EffectsApplied, rep.Retries, rep.BrokerDropped)
			}
			if rep.Crashes == 0 || rep.AcksLost == 0 || rep.HandlerFailures == 0 || rep.Restarts == 0 {
				t.Fatalf("chaos left no trace: %+v", rep)
			}
			if rep.DuplicatesSuppressed == 0 || rep.Conflicts == 0 || rep.ConflictDeadLetters < rep.Conflicts {
				t.Fatalf("%d duplicates suppressed, %d conflicts (%d dead letters)", rep.DuplicatesSuppressed, rep.Conflicts, rep.ConflictDeadLetters)
			}
			if rep.NaiveOvercharged == 0 {
				t.Fatalf("the naive consumer over-charged nothing: %+v", rep)
			}
		})
	}
}
