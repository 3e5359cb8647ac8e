package demo

import (
	"context"
	"testing"
)

// TestRunEventHubs runs the demo on the in-process Event Hubs, in both
// modes, under heavy chaos: the invariant holds, every producer retry
// reached the consumers (Event Hubs drops none), idem suppressed them and
// the batches crashed processes sent back, conflicts were dead-lettered
// to the dead-letter hub, and the naive consumer over-charged.
func TestRunEventHubs(t *testing.T) {
	for _, tc := range []struct{ store, mode string }{{"", "auto"}, {"memory://", "two-phase"}} {
		t.Run(tc.mode, func(t *testing.T) {
			rep, err := Run(context.Background(), Config{On: EventHubs, Store: tc.store, Mode: tc.mode,
				Orders: 100, Consumers: 3, CrashRate: 0.1, DupRate: 0.5, ConflictRate: 0.02, Seed: 5})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.InvariantOK {
				t.Fatalf("invariant broken: %v", rep.Offending)
			}
			if want := map[string]string{"": "tx", "memory://": "two-phase"}[tc.store]; rep.Mode != want {
				t.Errorf("mode %q, want %q", rep.Mode, want)
			}
			if rep.EffectsApplied != 100 || rep.Retries == 0 || rep.BrokerDropped != 0 {
				t.Fatalf("effects %d; %d producer retries, %d dropped by the broker", rep.EffectsApplied, rep.Retries, rep.BrokerDropped)
			}
			if rep.Crashes == 0 || rep.AcksLost == 0 || rep.HandlerFailures == 0 || rep.Restarts == 0 {
				t.Fatalf("chaos left no trace: %+v", rep)
			}
			if rep.DuplicatesSuppressed < int64(rep.Retries) || rep.Conflicts == 0 || rep.ConflictDeadLetters < rep.Conflicts {
				t.Fatalf("%d duplicates suppressed (%d retries), %d conflicts (%d dead letters)",
					rep.DuplicatesSuppressed, rep.Retries, rep.Conflicts, rep.ConflictDeadLetters)
			}
			if rep.NaiveOvercharged == 0 {
				t.Fatalf("the naive consumer over-charged nothing: %+v", rep)
			}
			t.Logf("%d deliveries, %d duplicates suppressed, %d crashes, %d restarts in %dms",
				rep.Deliveries, rep.DuplicatesSuppressed, rep.Crashes, rep.Restarts, rep.ElapsedMS)
		})
	}
}
