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
//		EntityPath: "orders",
//		Options: servicebus.ConsumerOptions{
//			MaxDeliveries: 10,                         // the queue's MaxDeliveryCount
//			Hooks:         broker.Hooks[*azservicebus.ReceivedMessage]{OnDeadLetter: alert},
//		},
//	})
//	err = c.Run(ctx)
//
// or servicebus.Consume(ctx, r, g, h, opts) in one call.
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
//     answers, spending no DeliveryCount (reported through Hooks.OnError as
//     a broker.OutageError).
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
// lease heartbeat (two timers: issue 30 item 5 would make them one); a
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
// takes it like the consumer's own. With MaxDeliveries 0 (unknown) every
// message Service Bus gives up on is dead-lettered that way.
//
// # Producer side and duplicate detection
//
// Send sets MessageID to idem.DedupID(id, fingerprint), so an entity with
// duplicate detection drops producer retries of the same content but never
// an id reused with other content (that reaches the consumer and is
// dead-lettered as a conflict). Duplicate detection is a complement: its
// window is bounded and it knows nothing of the consumer's work.
//
// # Sessions
//
// Session-enabled entities (AcceptNextSession) are not adapted here: a
// session receiver is a different client type with its own lock (the
// session's) and order, and holding a message for a key in progress
// elsewhere would stall its whole session. Use a Receiver on an entity
// without sessions.
//
// # Tests
//
// broker/servicebus/servicebustest is an in-process Service Bus the real
// client runs against (no Azure, no emulator container); this package's
// tests, broker/brokertest's conformance suite included, run on it.
package servicebus
