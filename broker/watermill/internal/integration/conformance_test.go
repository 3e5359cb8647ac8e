package integration_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/idemgo/idem/broker/brokertest"
	"github.com/idemgo/idem/broker/watermill/internal/integration/suite"
)

// TestConformance runs broker/brokertest on Watermill's in-process
// GoChannel: each subtest gets a GoChannel of its own.
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker {
		ch := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
		t.Cleanup(func() { ch.Close() })
		return suite.NewBroker(t, ch, func() (message.Subscriber, error) { return keepOpen{ch}, nil }, goChannelFeatures)
	})
}

// keepOpen is a subscriber of a shared GoChannel that a router's Close
// does not close (it would close the GoChannel for every consumer): its
// subscriptions end with their context, which the router cancels.
type keepOpen struct{ message.Subscriber }

func (keepOpen) Close() error { return nil }

// goChannelFeatures: GoChannel hands every message to every subscriber (a
// fan-out, not competing consumers), keeps nothing (a message published
// while no one subscribes, or in flight when a subscriber closes, is
// gone) and counts no deliveries.
var goChannelFeatures = brokertest.Features{Skip: map[string]string{
	"EffectivelyOnce":   "GoChannel fans every message out to every consumer: a reused id reaches each of the case's three consumers and is dead-lettered by each (the PostgreSQL Pub/Sub runs it)",
	"EffectivelyOnceTx": "GoChannel fans every message out to every consumer (the PostgreSQL Pub/Sub runs it)",
	"CrashBeforeSettle": "GoChannel drops a message in flight when its subscriber closes: a crash loses it at the Pub/Sub, before idem",
	"LastDeliveryCrash": "Watermill counts no deliveries",
	"GracefulStopSettlesEverything": "GoChannel discards what its closing subscriber was not yet handed, and gives a later subscriber " +
		"nothing published before it subscribed (the PostgreSQL Pub/Sub runs it)",
	"ConflictDeadLetterHeaders": "a Watermill message carries no broker position (sequence, offset); " +
		"idem's headers on a conflict are checked by DeadLetterHeadersEveryReason",
	"InProgressWaitsForLease": "GoChannel fans the producer's retry out to both consumers, and the one running the first copy takes it only after it (the PostgreSQL Pub/Sub runs it)",
}}
