// Package servicebus makes Azure Service Bus consumers idempotent, on the
// official SDK (github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus):
// a receiver in PeekLock mode on a queue or a topic subscription, whose
// messages run under an idem guard and are completed only once the record
// is durable. It has the one consumer shape of every idem broker adapter
// (see broker):
//
//	g, err := servicebus.NewGuard(store, servicebus.EntityPath("orders"), idem.Options{})
//	r, err := client.NewReceiverForQueue("orders", nil)   // PeekLock, the default
//	c, err := servicebus.NewConsumer(r, g, servicebus.HandleTx(fn), servicebus.Options{
//		EntityPath:       "orders",
//		MaxDeliveryCount: 10,                              // the queue's
//		Hooks:            broker.Hooks[*azservicebus.ReceivedMessage]{OnDeadLetter: alert},
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
//   - transient failure: held for the back-off, then AbandonMessage
//     (Service Bus redelivers an abandoned message at once, with
//     DeliveryCount + 1). On the MaxDeliveryCount-th delivery the consumer
//     dead-letters it itself (reason max_deliver), with idem's properties.
//   - conflict, permanent failure, no key, parked: DeadLetterMessage with
//     DeadLetterReason (the idem reason), DeadLetterErrorDescription (the
//     error) and idem.DeadLetterHeaders as application properties, beside
//     the message's sequence number, enqueued time and delivery count.
//
// While a message is in the consumer its lock is renewed (RenewMessageLock,
// every third of the lock), beside the guard's own lease heartbeat; a lock
// Service Bus reports lost cancels the handler's context with cause
// ErrLockLost, the way a lost lease does, and its delivery spends no
// back-off (the message is available again already). A completion that
// fails because the lock was lost is harmless: the redelivery finds the
// record and is a duplicate.
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
