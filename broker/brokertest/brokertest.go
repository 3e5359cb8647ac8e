// Package brokertest is the conformance suite every idem broker adapter
// runs: the executable definition of what an adapter must do, as
// store/storetest is for stores (Watermill's pub/sub test suite is the
// model). An adapter hands the suite a Broker — a way to publish, to start
// and kill consumers, and to read dead letters — and Features naming what
// the broker cannot do; those cases skip and say why.
//
//	func TestConformance(t *testing.T) {
//		brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newIsolatedBroker(t) })
//	}
//
// Each subtest asks for a fresh Broker on its own destination (a topic, a
// stream, a queue), so subtests never see each other's messages. The suite
// builds the guards itself, on the in-memory store for two-phase handlers
// and on an embedded SQLite database for transactional ones, so every
// adapter is held to the same flow.
//
// Beside effectively-once delivery under crashes and producer retries, the
// suite holds every adapter to what its broker could lose: a store that
// refuses connections for three times the broker's retry budget
// (StoreOutage: nothing dead-lettered, lost or applied twice), a consumer
// killed on a message's last allowed delivery (LastDeliveryCrash: applied
// once or dead-lettered, never gone), one idem header set on the dead
// letters of every reason (DeadLetterHeadersEveryReason), and, on brokers
// that deduplicate by a producer's id (Deduplicator), a replay that the
// broker's duplicate window does not swallow
// (ReplayInsideDuplicateWindow).
package brokertest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Broker is one adapter on one isolated destination.
type Broker interface {
	// Features says what the broker cannot do.
	Features() Features
	// Publish sends msgs to the destination in order and waits until the
	// broker has them durably. A Message with an empty ID is published
	// without any id (poison). Publish never deduplicates on the broker's
	// side: the suite sends producer retries on purpose.
	Publish(ctx context.Context, msgs ...Message) error
	// Start starts one consumer on the destination, running until Stop or
	// Kill. Several may run at once: they compete for the messages.
	Start(ctx context.Context, c Consumer) (Running, error)
	// DeadLetters returns the dead letters received so far, in any order.
	DeadLetters(ctx context.Context) ([]DeadLetter, error)
}

// Running is a started consumer.
type Running interface {
	// Stop shuts the consumer down gracefully and waits for it: in-flight
	// deliveries finish and are settled, claims not run are given back.
	Stop() error
	// Kill stops the consumer as a crash would: its connection closes at
	// once and nothing more is settled (an ack attempted after Kill fails,
	// offsets are not committed). It does not wait for in-flight handlers,
	// so a hook may call it; they wind down on their own before the test
	// ends.
	Kill()
}

// Consumer is what Start runs. The adapter builds its consumer with the
// given guard, wraps Handle (or HandleTx) with its Handle / HandleTx, maps
// its messages to idem.Message with its MessageOf for the hooks, and
// applies MaxDeliveries to the broker's delivery limit where it has one.
type Consumer struct {
	Guard *idem.Guard
	// Handle is the two-phase handler; HandleTx, when set, the
	// transactional one (the guard's store is then a TxStore[*sql.Tx]).
	Handle   func(ctx context.Context, m idem.Message) ([]byte, error)
	HandleTx func(ctx context.Context, tx *sql.Tx, m idem.Message) ([]byte, error)
	// Hooks see every delivery, with the message as MessageOf maps it.
	Hooks broker.Hooks[idem.Message]
	// Concurrency is how many deliveries the consumer handles at once (0:
	// the adapter's default).
	Concurrency int
	// MaxDeliveries is the broker's delivery limit for the destination (0:
	// none). Adapters with Features.DeliveryLimit apply it, so that a
	// delivery past it would be dead-lettered (broker.ReasonMaxDeliver).
	MaxDeliveries int
	// RetryBackoff, when set, is the adapter's back-off for transient
	// failures (its Backoff / RetryMin option): short in the suite.
	RetryBackoff time.Duration
}

// Message is one published message.
type Message struct {
	ID       string            // the stable id ("" publishes a message without one)
	Payload  []byte            //
	Headers  map[string]string // extra headers / application properties
	OrderKey string            // the partition / ordering key where the broker has one
}

// DeadLetter is one dead letter as the operator sees it.
type DeadLetter struct {
	// ID is the original message id, read back from the dead letter's
	// headers (or properties) where the adapter keeps it.
	ID      string
	Payload []byte
	// Headers are the dead letter's headers, idem's (idem.DeadLetterHeaders)
	// and the transport's, by name.
	Headers map[string]string
}

// Reason is the dead letter's idem.HeaderReason.
func (d DeadLetter) Reason() string { return d.Header(idem.HeaderReason) }

// Header returns the named header, matched case-insensitively (AMQP
// adapters may lower-case names).
func (d DeadLetter) Header(name string) string {
	return idem.Message{Headers: d.Headers}.Header(name)
}

// Features name what a broker cannot do, so the cases that need it skip
// with the reason.
type Features struct {
	// Ordered: the broker keeps the order of messages sharing an OrderKey
	// (Kafka per partition, a single JetStream consumer), and the adapter
	// handles them in that order, holding later ones while an earlier one
	// is retried.
	Ordered bool
	// DeliveryLimit: the broker counts deliveries toward a limit that the
	// adapter honours (Consumer.MaxDeliveries).
	DeliveryLimit bool
	// Redelivery is how long the broker leaves a delivery unsettled before
	// it delivers it again by itself (JetStream's AckWait, a Service Bus
	// lock duration; 0 where only a closed connection or a nak redelivers):
	// StoreOutage keeps the store down for three times MaxDeliveries of
	// them, so that a consumer that let deliveries run out would be caught.
	Redelivery time.Duration
	// Skip names cases this broker cannot run, with the reason printed.
	Skip map[string]string
}

// Run runs the whole suite against brokers made by newBroker.
func Run(t *testing.T, newBroker func(t *testing.T) Broker) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBroker(t)
			f := b.Features()
			if why, ok := f.Skip[tc.name]; ok {
				t.Skipf("%s: %s", tc.name, why)
			}
			if tc.needs != nil {
				if why := tc.needs(f); why != "" {
					t.Skipf("broker cannot: %s", why)
				}
			}
			tc.fn(t, b)
		})
	}
}

type suiteCase struct {
	name  string
	needs func(Features) string // "" when the broker can run it
	fn    func(t *testing.T, b Broker)
}

var cases = []suiteCase{
	{name: "EffectivelyOnce", fn: testEffectivelyOnce},
	{name: "EffectivelyOnceTx", fn: testEffectivelyOnceTx},
	{name: "CrashBeforeSettle", fn: testCrashBeforeSettle},
	{name: "GracefulStopSettlesEverything", fn: testGracefulStop},
	{name: "TransientRetried", fn: testTransient},
	{name: "PermanentDeadLettered", fn: testPermanent},
	{name: "PoisonDeadLetteredFirstDelivery", fn: testPoison},
	{name: "ConflictDeadLetterHeaders", fn: testConflictHeaders},
	{name: "InProgressWaitsForLease", fn: testInProgressWaits},
	{name: "OrphanedClaimRetaken", fn: testOrphanedClaim},
	{name: "StaleParkedByDefault", fn: testStaleParkedByDefault},
	{name: "Replay", fn: testReplay},
	{name: "ReplayInsideDuplicateWindow", fn: testReplayInsideDuplicateWindow},
	{name: "DeliveryLimitDeadLetters", needs: needsDeliveryLimit, fn: testDeliveryLimit},
	{name: "StoreOutage", fn: testStoreOutage},
	{name: "ObserverSeesEverySettle", fn: testObserverSeesEverySettle},
	{name: "LastDeliveryCrash", needs: needsDeliveryLimit, fn: testLastDeliveryCrash},
	{name: "DeadLetterHeadersEveryReason", fn: testDeadLetterHeadersEveryReason},
	{name: "DeadLetterHeadersTx", fn: testDeadLetterHeadersTx},
	{name: "OrderKept", needs: func(f Features) string {
		if !f.Ordered {
			return "no order guarantee"
		}
		return ""
	}, fn: testOrder},
}

func needsDeliveryLimit(f Features) string {
	if !f.DeliveryLimit {
		return "no delivery limit"
	}
	return ""
}
