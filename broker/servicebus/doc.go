// Package servicebus makes Azure Service Bus consumers idempotent, on the
// official SDK (github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus):
// a receiver in PeekLock mode on a queue or a topic subscription, whose
// messages run under an idem guard and are completed only once the record
// is durable. It has the one consumer shape of every idem broker adapter
// and runs on their one consumer engine (broker.Consumer; this package is
// its Service Bus transport):
//
//	g, err := servicebus.NewGuard(store, servicebus.EntityPath("orders"), idem.Options{})
//	r, err := client.NewReceiverForQueue("orders", nil)   // PeekLock, the default
//	c, err := servicebus.NewConsumer(r, g, servicebus.HandleTx(fn), servicebus.Options{
//		EntityPath:    "orders",
//		MaxDeliveries: 10, // the queue's MaxDeliveryCount
//		Hooks:         broker.Hooks[*azservicebus.ReceivedMessage]{OnDeadLetter: alert},
//	})
//	err = c.Run(ctx)
//
// or servicebus.Consume(ctx, r, g, h, opts) in one call.
//
// The guide, with the producer side, the one clock for a slow handler and the tests:
// https://github.com/idemgo/idem/blob/main/docs/brokers/servicebus.md
//
// # Key and scope
//
// The key is the MessageID (MessageOf puts it in idem.Message.ID, so the
// default idem.MessageID works), or the plain id Send put in Idem-Id. Never
// LockToken, SequenceNumber or DeliveryCount (they change on redelivery),
// and never CorrelationID (it names a group of messages, not one). Any
// other key function of idem (idem.HeaderKey over an application property,
// idem.CloudEventsKey for the CloudEvents AMQP binding's cloudEvents:id
// property, a JSON field) works over MessageOf's headers. The scope
// defaults to the entity path (NewGuard).
//
// # Outcomes and settlement
//
//   - processed, duplicate: CompleteMessage, after the record is durable.
//   - in progress elsewhere: the message is held, its lock renewed, and its
//     key claimed again on the back-off, at the latest when the holder's
//     lease ends (idem.RetryAfter), up to Options.MaxHold; then abandoned.
//     A live duplicate thus never walks DeliveryCount up to
//     MaxDeliveryCount.
//   - store unreachable (claim, commit or completion): the message is held,
//     its lock renewed, and claimed again on the back-off until the store
//     answers, spending no DeliveryCount (reported to the guard's observer
//     as an idem.Outage).
//   - transient failure: held for the back-off, its lock renewed, then
//     AbandonMessage (Service Bus redelivers an abandoned message at once,
//     with DeliveryCount + 1: an abandon cannot be delayed, so the engine
//     waits). On the last delivery (see below) the consumer dead-letters
//     it itself (reason max_deliver), with idem's properties.
//   - conflict, permanent failure, no key, parked: DeadLetterMessage with
//     DeadLetterReason (the idem reason), DeadLetterErrorDescription (the
//     error) and idem.DeadLetterHeaders as application properties, beside
//     the message's sequence number, enqueued time and delivery count.
//
// While a message is in the consumer its lock is renewed (RenewMessageLock,
// every third of the lock or Options.LockRenewal), beside the guard's own
// lease heartbeat (see "One clock for a slow handler"); a
// lock Service Bus reports lost cancels the handler's context with cause
// ErrLockLost, the way a lost lease does, and its delivery is not settled
// at all (the message is available again already). A completion that
// fails because the lock was lost is harmless: the redelivery finds the
// record and is a duplicate.
//
// # At MaxDeliveryCount
//
// Service Bus counts every abandon and every lock expiry in DeliveryCount;
// a message abandoned, or whose lock expires, on the delivery whose
// DeliveryCount is the entity's MaxDeliveryCount (default 10) is moved to
// the dead-letter queue by Service Bus itself, with DeadLetterReason
// MaxDeliveryCountExceeded, DeadLetterErrorDescription "Message could not
// be consumed after N delivery attempts." and its application properties
// as they were: none of idem's. Set Options.MaxDeliveries to the entity's
// MaxDeliveryCount and that delivery is the last (DeliveryCount >=
// MaxDeliveries): the consumer never abandons it. A retry on it is
// dead-lettered by the consumer first, reason max_deliver, with idem's
// properties; held in progress elsewhere or during a store outage, it is
// held without bound (at shutdown until ShutdownTimeout, then
// dead-lettered). Only a consumer that dies, or loses the lock, holding
// the last delivery leaves it to Service Bus: it is then in the
// dead-letter queue with MaxDeliveryCountExceeded, never lost, and Replay
// (and DeadLetterOf, an operator's view of a dead letter) takes it like
// the consumer's own. With MaxDeliveries 0 (unknown) every
// message Service Bus gives up on is dead-lettered that way.
//
// # Sessions
//
// A session-enabled queue or subscription (FIFO per SessionID: per order,
// per customer) is consumed by a SessionConsumer, in the same shape:
//
//	c, err := servicebus.NewSessionConsumer(client, "orders", g, servicebus.Handle(fn), servicebus.Options{
//		Sessions:      8, // sessions held at once (default Concurrency)
//		MaxDeliveries: 10,
//	})
//	err = c.Run(ctx)
//
// Each of its Sessions workers accepts the next available session
// (AcceptNextSessionForQueue / ForSubscription), renews the session's
// lock while it holds it (every Options.LockRenewal, by default a third
// of the lock) and handles the session's messages one at a time, in
// order, on the same engine as Consumer (broker.Processor.ProcessUntil per
// message). A retry never abandons the message, which would let the next
// one overtake it: it is tried again in place after its back-off, the
// session held. A message whose key is in progress elsewhere (an
// orphaned claim of a session holder that crashed) is held, the session
// with it, until the claim's lease ends, then retaken; MaxDeliveries
// bounds the handler's failures as for Consumer (the in-place retries
// count in the transactional inbox's delivery count). A session that
// brings no message for Options.SessionIdleTimeout is released for
// another; a session lock Service Bus reports lost cancels the handler
// (cause ErrLockLost) and the worker accepts anew. A completion after the
// session's lock ran out may be reported done by the client (it recovers
// its link and loses the refusal) although the message comes back: its
// record makes that redelivery a duplicate, so nothing runs twice. The key and the scope
// are the guard's, as for Consumer. A plain Consumer over a receiver of
// an entity with sessions is refused by Service Bus (the receiver's
// first receive fails).
package servicebus
