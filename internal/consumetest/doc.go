// Package consumetest holds the test helpers that the tests of the broker
// adapters built on internal/consume (broker/nats, broker/amqp) share: for
// running broker/brokertest (SuiteHandler, Hooks, Backoff, Start), and for
// what the suite does not cover: holding a delivery whose key is in
// progress elsewhere (InProgressSeen, AwaitHeld, Blocker, Orphan,
// HoldElsewhere), a graceful shutdown with a handler in flight
// (ShutdownWaits), and reports taken from the hooks (ReportTo, CountAcks).
// It is imported by tests only.
//
//	obs, seen := consumetest.InProgressSeen()
//	g, _ := natsidem.NewGuard(store, cons, idem.Options{Observer: obs})
//	// ... a consumer holds a duplicate of a message whose handler blocks ...
//	consumetest.AwaitHeld(t, seen, 3, reports)
package consumetest
