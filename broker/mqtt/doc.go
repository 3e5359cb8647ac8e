// Package mqttidem consumes QoS 1 messages of an MQTT v5 topic filter
// through a persistent session (eclipse/paho.golang's autopaho) on idem's
// consumer engine (broker.Consumer): each message is handled once, however
// often the broker delivers it, under a guard on any idem store. The
// import path is github.com/idemgo/idem/broker/mqtt; the package is named
// mqttidem to sit beside paho's mqtt.
//
//	opts := mqttidem.Options{
//		Server: "mqtt://broker:1883", ClientID: "ingest-1", // the same on every restart
//		Topic: "$share/ingest/sensors/+/readings", DeadLetterTopic: "dlq/sensors",
//	}
//	g, err := mqttidem.NewGuard(store, opts.Topic, opts.ClientID, idem.Options{}) // scope: the shared subscription
//	c, err := mqttidem.NewConsumer(g, mqttidem.Handle(fn), opts)
//	err = c.Run(ctx)
//
// or mqttidem.Consume(ctx, g, h, opts) in one call. It has the shape of
// every idem broker adapter (see package github.com/idemgo/idem/broker):
// NewGuard (scope: the shared subscription, or the session of an unshared
// one), Handle (two-phase) or HandleTx (the store's transaction with the
// dedup marker), NewConsumer and Run or Consume, MessageOf, DeadLetterOf
// and Replay for dead letters, and Publish on the producer side: the key
// in the idem-id user property, at QoS 1 at least. MQTT has no duplicate
// detection of its own, so Publish sets no dedup id: a producer's retry is
// another message, and the consumer's record makes it a duplicate.
//
// How the engine's steps map onto MQTT:
//
//   - The session is persistent: clean start false, Options.SessionExpiry
//     (default 24h), so messages published while the consumer is away, and
//     those it received but did not ack, wait in the broker. Run subscribes
//     at QoS 1 on every connection and reconnects when one drops; the
//     broker then redelivers every unacked message, dup set.
//   - The key is the idem-id user property (MessageOf), or, without one,
//     whatever the guard's idem.Options.Key reads from the payload. Never
//     the packet id: it names a slot of the session and is reused once
//     acked.
//   - Ack is the PUBACK, released after the record is durable. MQTT orders
//     PUBACKs as the PUBLISHes came, so paho holds a released PUBACK until
//     every earlier delivery of the connection is acked too: a message
//     being retried or held (its key in progress elsewhere, the store
//     unreachable) delays the acks of later ones, and once
//     Options.ReceiveMaximum deliveries are unacked the broker
//     sends no more until it is settled. A connection lost meanwhile has
//     those later messages redelivered; their records make them
//     duplicates, acked without running the handler.
//   - MQTT has no nack and no redelivery timer: an unacked message comes
//     back only on the session's next connection. So Retry is done in
//     place: the engine waits out the back-off (the delivery kept, its
//     PUBACK unsent) and the message is queued again in this process.
//     Delivery counts are this process's tries (the broker keeps none and
//     drops nothing), so MaxDeliveries counts handler failures in the
//     record (two-phase mode); in the inbox mode the count restarts with
//     each connection.
//   - At shutdown, deliveries not started are left unacked: the session
//     redelivers them when the same ClientID connects again. Run waits for
//     paho to send the released PUBACKs before it disconnects.
//   - A dead letter is published at QoS 1 to Options.DeadLetterTopic (Run
//     waits for its PUBACK) with the message's user properties, idem's
//     headers (broker.DeadLetterHeaders) and Idem-Original-Topic,
//     Idem-Client-Id; then the original is acked. A connection lost between
//     the two redelivers the original and may write its dead letter twice.
//     Replay publishes a received dead letter back to its original topic
//     without idem's headers; the record decides as for any redelivery
//     (brokertest's Replay case).
//
// Several processes share the messages through a shared subscription
// ($share/group/filter), each with a ClientID of its own, kept across
// restarts: a process that comes back under another id leaves its unacked
// messages in the old session until it expires. Handlers run concurrently
// (Concurrency, at most ReceiveMaximum) and retries go to the back of the
// queue, so no order is kept.
//
// The guide: https://github.com/idemgo/idem/blob/main/docs/brokers/mqtt.md
package mqttidem
