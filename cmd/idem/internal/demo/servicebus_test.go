package demo

import (
	"context"
	"errors"
	"strings"
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
			rep, err := Run(context.Background(), Config{On: ServiceBus, Store: tc.store, Mode: tc.mode,
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

// TestRunServiceBusOutbox runs the demo on Service Bus with the outbox
// producer: every order goes through a SQLite outbox and its relay
// (outbox/servicebus). The outbox keeps each producer retry once (none is
// published), a reused id with other content still reaches the consumers
// and is dead-lettered, and the invariant holds under the same chaos.
func TestRunServiceBusOutbox(t *testing.T) {
	rep, err := Run(context.Background(), Config{On: ServiceBus, Producer: ProducerOutbox,
		Orders: 300, Consumers: 4, CrashRate: 0.2, DupRate: 0.5, ConflictRate: 0.02, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.InvariantOK {
		t.Fatalf("invariant broken: %v", rep.Offending)
	}
	if !strings.Contains(rep.Producer, "outbox") {
		t.Errorf("producer %q, want the outbox named", rep.Producer)
	}
	if rep.EffectsApplied != 300 || rep.Retries == 0 || rep.OutboxKeptOnce != rep.Retries || rep.BrokerDropped != 0 {
		t.Fatalf("effects %d; %d producer retries, %d kept once by the outbox, %d dropped by the broker",
			rep.EffectsApplied, rep.Retries, rep.OutboxKeptOnce, rep.BrokerDropped)
	}
	if rep.Conflicts == 0 || rep.ConflictDeadLetters < rep.Conflicts || rep.Crashes == 0 || rep.DuplicatesSuppressed == 0 {
		t.Fatalf("%d conflicts (%d dead letters), %d crashes, %d duplicates suppressed", rep.Conflicts, rep.ConflictDeadLetters, rep.Crashes, rep.DuplicatesSuppressed)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "producer: outbox") || !strings.Contains(table.String(), "kept once by the outbox") {
		t.Errorf("the table does not say the outbox produced:\n%s", table.String())
	}
}

// The outbox producer needs a broker with an outbox publisher in the demo:
// on the others it is refused before anything runs, naming the one it
// runs on.
func TestOutboxProducerRefusedElsewhere(t *testing.T) {
	_, err := Run(context.Background(), Config{Producer: ProducerOutbox, Orders: 10})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), ServiceBus.name) {
		t.Fatalf("outbox producer on the embedded NATS: %v, want ErrConfig naming --broker servicebus", err)
	}
	if _, err := Run(context.Background(), Config{Producer: "carrier-pigeon", Orders: 10}); err == nil || !strings.Contains(err.Error(), "producer") {
		t.Fatalf("unknown producer: %v", err)
	}
}
