package demo

import (
	"context"
	"testing"
)

// TestRunKafka runs the demo on the in-process Kafka, in both modes,
// under heavy chaos: the invariant holds, every producer retry reached the
// consumers (Kafka drops none), idem suppressed them and the redeliveries
// of crashed members, and the naive consumer over-charged.
func TestRunKafka(t *testing.T) {
	runStream(t, Kafka, nil)
}

// runStream runs the demo on a stream broker (Kafka, Event Hubs) in both
// modes under heavy chaos and checks what every stream must show: the
// invariant holds, every producer retry reached the consumers (a stream
// drops none), idem suppressed them and what crashed consumers sent back,
// conflicts were dead-lettered, chaos left its traces, and the naive
// consumer over-charged; then check, when not nil, with the store the run
// was given.
func runStream(t *testing.T, on *Broker, check func(t *testing.T, store string, rep *Report)) {
	for _, tc := range []struct{ store, mode string }{{"", "auto"}, {"memory://", "two-phase"}} {
		t.Run(tc.mode, func(t *testing.T) {
			rep, err := Run(context.Background(), Config{On: on, Store: tc.store, Mode: tc.mode,
				Orders: 100, Consumers: 3, CrashRate: 0.1, DupRate: 0.5, ConflictRate: 0.02, Seed: 5})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.InvariantOK {
				t.Fatalf("invariant broken: %v", rep.Offending)
			}
			if rep.EffectsApplied != 100 || rep.Retries == 0 || rep.BrokerDropped != 0 {
				t.Fatalf("effects %d; %d producer retries, %d dropped by the broker", rep.EffectsApplied, rep.Retries, rep.BrokerDropped)
			}
			if rep.Crashes == 0 || rep.HandlerFailures == 0 || rep.Restarts == 0 {
				t.Fatalf("chaos left no trace: %+v", rep)
			}
			if rep.DuplicatesSuppressed < int64(rep.Retries) || rep.Conflicts == 0 || rep.ConflictDeadLetters < rep.Conflicts {
				t.Fatalf("%d duplicates suppressed (%d retries), %d conflicts (%d dead letters)",
					rep.DuplicatesSuppressed, rep.Retries, rep.Conflicts, rep.ConflictDeadLetters)
			}
			if rep.NaiveOvercharged == 0 {
				t.Fatalf("the naive consumer over-charged nothing: %+v", rep)
			}
			if check != nil {
				check(t, tc.store, rep)
			}
			t.Logf("%d deliveries, %d duplicates suppressed, %d crashes, %d restarts in %dms",
				rep.Deliveries, rep.DuplicatesSuppressed, rep.Crashes, rep.Restarts, rep.ElapsedMS)
		})
	}
}
