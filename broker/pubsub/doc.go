// Package pubsubidem makes Google Cloud Pub/Sub consumers idempotent, on
// the client library cloud.google.com/go/pubsub/v2: the messages of a
// subscription, received by the client's streaming pull
// (Subscriber.Receive), run under an idem guard and are acked only once
// the record is durable. It has the one consumer shape of every idem
// broker adapter and runs on their one consumer engine (broker.Consumer;
// this package is its Pub/Sub transport). The import path is
// github.com/idemgo/idem/broker/pubsub; the package is named pubsubidem to
// sit beside the client's pubsub.
//
//	sub := client.Subscriber("orders-billing")
//	g, err := pubsubidem.NewGuard(store, sub, idem.Options{})   // scope: the subscription
//	c, err := pubsubidem.NewConsumer(sub, g, pubsubidem.Handle(fn), pubsubidem.Options{
//		DeadLetter:    client.Publisher("orders-dlq"),
//		Concurrency:   8,
//		MaxDeliveries: 10, // the dead-letter policy's
//	})
//	err = c.Run(ctx)
//
// or pubsubidem.Consume(ctx, sub, g, h, opts) in one call. Handle runs the
// work two-phase, HandleTx in the store's transaction with the dedup
// marker; MessageOf is the guard's view of a message, DeadLetterOf an
// operator's view of a dead letter, Replay puts one back on its topic, and
// Publish sets the key (the Idem-Id attribute) on the producer side.
// Pub/Sub has no duplicate detection on publish, so Publish sets no dedup
// id: a retried publish is stored twice, and the consumer's record makes
// the second a duplicate.
//
// The guide, with ack deadlines, flow control and what the tests run on:
// https://github.com/idemgo/idem/blob/main/docs/brokers/pubsub.md
//
// # Key and scope
//
// The key is the publisher's own id, the Idem-Id attribute (MessageOf
// puts it in idem.Message.ID, so the default idem.MessageID works; Publish
// sets it), or any attribute or payload field through the guard's
// idem.Options.Key: idem.HeaderKey("order-id"), idem.CloudEventsKey for
// the CloudEvents Pub/Sub binding's ce-id and ce-source attributes, or
// idem.FirstOf(idem.MessageID, idem.CloudEventsKey). Never the server's
// message id alone: Pub/Sub assigns it when it stores a publish, so a
// publish the client retried (its reply lost to a timeout) is stored
// twice under two ids, and a key on it would run the copy again; it only
// names redeliveries of one stored copy. A message without a usable key is
// dead-lettered on its first delivery (poison). The scope defaults to the
// subscription's full name (NewGuard).
//
// # Outcomes and settlement
//
//   - processed, duplicate: AckWithResult, after the record is durable,
//     waiting for its outcome.
//   - in progress elsewhere: held, its key claimed again on the back-off,
//     at the latest when the holder's lease ends, up to Options.MaxHold;
//     then nacked. A live duplicate never walks DeliveryAttempt up.
//   - store unreachable: held and claimed again on the back-off until the
//     store answers, spending no delivery attempt.
//   - transient failure: held for the back-off, then NackWithResult.
//     Pub/Sub redelivers a nacked message at once (or after the
//     subscription's retry policy's back-off, which is Pub/Sub's, not
//     idem's): a nack cannot carry a delay, so the engine waits it out
//     (RetryDelays is false).
//   - conflict, permanent failure, no key, parked, MaxDeliveries reached:
//     published to Options.DeadLetter with the message's data and
//     attributes, idem's headers (broker.DeadLetterHeaders, each value cut
//     to MaxAttributeValue, Pub/Sub's limit) and its position
//     (Idem-Subscription, Idem-Original-Position: the server message id,
//     Idem-Publish-Time, Idem-Delivery-Attempt, Idem-Ordering-Key); once
//     Pub/Sub stored it, the original is acked. Replay puts a dead letter
//     back on its topic.
//
// # Dead-letter policy and the last delivery
//
// On a subscription with a dead-letter policy Pub/Sub counts deliveries
// (Message.DeliveryAttempt) and forwards a message whose count reached
// MaxDeliveryAttempts to the policy's topic itself, as it was: none of
// idem's attributes. Set Options.MaxDeliveries to MaxDeliveryAttempts and
// the delivery with DeliveryAttempt >= MaxDeliveries is the last: the
// consumer never nacks it. A retry on it is dead-lettered by the consumer
// first, reason max_deliver, with idem's attributes; held in progress
// elsewhere or during a store outage, it is held without bound (at
// shutdown until ShutdownTimeout, then dead-lettered). Only a consumer
// that dies holding the last delivery (or whose deadline was lost) leaves
// it to Pub/Sub's forwarding: it is then on the policy's topic without
// idem's attributes, never lost, and Replay takes it too. Options.DeadLetter
// may publish to the policy's topic, so that operators read one place.
// Without a dead-letter policy Pub/Sub counts nothing (DeliveryAttempt is
// nil, the attempt is 1) and never drops a message; MaxDeliveries then
// counts the handler's failures in the record (two-phase mode).
//
// # Exactly-once delivery
//
// Both kinds of subscription work alike. The consumer always acks with
// AckWithResult and waits for the result: without exactly-once delivery
// the client reports success at once (an ack is best effort, and a lost
// one is a redelivery); with it, the client waits for Pub/Sub's answer. An
// ack Pub/Sub refuses (its ack id expired, the message redelivered
// meanwhile) is reported in the Report's BrokerErr and to the guard's
// observer (idem.ErrorObserver); the message comes back and its record makes it a
// duplicate, acked without running the handler, so nothing is applied
// twice. The wait has a price: the client sends acks in batches every
// 100ms, so a worker settles about ten messages a second; raise
// Concurrency (and MaxOutstandingMessages with it) for throughput. The
// wait ends when the client's Receive does (the client closed under it):
// no answer comes then, and the ack is reported failed. A refused nack is
// harmless (the message comes back anyway). A
// dead letter whose original's ack is refused comes back and is
// dead-lettered again: dead letters are at least once.
//
// # Shutdown
//
// Run's end is the engine's graceful shutdown: receiving stops, messages
// received and not started, held ones and those waiting on their back-off
// are nacked (a last delivery among them is handled, and dead-lettered by
// the consumer if it fails, rather than nacked),
// in-flight handlers finish within ShutdownTimeout and are settled, and
// Run returns once the client's Receive has sent the last acks. The
// client itself nacks the messages it had pulled and not yet passed to
// its callbacks when receiving stops; a last delivery among them is
// forwarded by Pub/Sub's dead-letter policy, without idem's attributes
// (never lost; Replay takes it).
package pubsubidem
