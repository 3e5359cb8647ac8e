// Package sqsidem makes Amazon SQS consumers idempotent, on the official
// SDK (github.com/aws/aws-sdk-go-v2/service/sqs): each message of a queue
// runs under an idem guard and is deleted only once its record is
// durable. It has the one consumer shape of every idem broker adapter and
// runs on their one consumer engine (broker.Consumer; this package is its
// SQS transport). Its name takes the suffix "idem" beside the SDK's sqs.
//
//	g, err := sqsidem.NewGuard(store, queueURL, idem.Options{})   // scope: the queue's name
//	c, err := sqsidem.NewConsumer(client, g, sqsidem.Handle(fn), sqsidem.Options{
//		QueueURL:           queueURL,
//		DeadLetterQueueURL: dlqURL,
//		Concurrency:        8,
//	})
//	err = c.Run(ctx)
//
// or sqsidem.Consume(ctx, client, g, h, opts) in one call.
//
// The guide, with what the tests run on:
// https://github.com/idemgo/idem/blob/main/docs/brokers/sqs.md
//
// # Key
//
// The key is the producer's id, in the Idem-Id message attribute that Send
// sets (MessageOf puts it in idem.Message.ID, so the default
// idem.MessageID works); any other message attribute is a header for
// idem.HeaderKey, and idem.JSONFieldsKey reads the body. Never the SQS
// MessageId: SQS gives every accepted send a MessageId of its own, so on
// a standard queue a producer that retries a send whose answer it lost
// (a timeout after SQS had taken it) makes a second message with another
// MessageId, and a key from it would apply the order twice. Nor the
// receipt handle or the receive count, which change on every delivery.
//
// # How the engine's steps map onto SQS
//
//   - Receive is ReceiveMessage, long-polling (Options.WaitTime), at most
//     ten messages and no more than the free workers, with
//     Options.VisibilityTimeout, all message attributes and the
//     ApproximateReceiveCount, SentTimestamp, MessageGroupId and
//     SequenceNumber system attributes.
//   - Ack is DeleteMessage, after the record is durable. A receipt handle
//     superseded by a later receive deletes nothing (SQS answers
//     success): the message comes back, and its record makes it a
//     duplicate.
//   - While a message is handled, or held (its key in progress elsewhere,
//     the store unreachable), its visibility is extended
//     (ChangeMessageVisibility to VisibilityTimeout, every third of it),
//     so no other consumer receives it and no receive is spent. When SQS
//     refuses (the visibility ran out and the message was received
//     again, or deleted: ReceiptHandleIsInvalid, MessageNotInflight, an
//     invalid receipt handle) the handler's context is cancelled with
//     cause ErrLockLost and nothing is settled: the message is
//     redelivered and its record decides again. SQS ends every visibility
//     at most 12 hours after the receive: a message handled or held
//     longer comes back to another consumer, whose claim waits for the
//     guard's lease.
//   - Retry is ChangeMessageVisibility to the back-off (rounded up to
//     whole seconds): the message is received again once it has passed,
//     by any consumer, which costs one receive.
//   - A dead letter is sent to Options.DeadLetterQueueURL with the
//     message's body and attributes, HeaderReason and, in one attribute
//     (HeaderDeadLetter: SQS allows ten a message), idem's headers
//     (broker.DeadLetterHeaders) and the original's position: its queue,
//     MessageId, receive count, sent time and, on a FIFO queue, group and
//     sequence number (DeadLetterOf unpacks them); then the original is
//     deleted. Replay sends a dead letter back to its queue.
//
// # The redrive policy at maxReceiveCount
//
// SQS counts every receive in ApproximateReceiveCount. A message received
// maxReceiveCount times that becomes visible again (a retry, a
// visibility that ran out, a consumer that died) is moved by SQS, at the
// next receive, to the redrive policy's dead-letter queue as it was sent:
// its body and attributes, none of idem's. So that none is moved that
// way while idem could say why, set Options.MaxDeliveries to the
// maxReceiveCount (or leave it 0: Run reads it from the queue, and
// refuses a MaxDeliveries above it). The delivery whose receive count
// reaches it is the last: the consumer never makes it visible again; a
// retry on it is dead-lettered by the consumer first, reason
// max_deliver, with idem's headers; held in progress elsewhere or during
// a store outage, it is kept in flight without bound (at shutdown until
// ShutdownTimeout, then dead-lettered). Only a consumer that dies, or
// loses the visibility, holding the last delivery leaves it to SQS: it is
// then in the dead-letter queue without idem's headers, never lost, and
// its Idem-Id still names its key (DeadLetterOf and Replay report
// ErrNotDeadLetter for it: send it back as it is, or with SQS's own
// redrive). A store outage spends no receive, and a duplicate held while
// its key is in progress elsewhere spends none either, so neither walks
// a message toward the redrive.
//
// # FIFO queues
//
// A queue whose URL ends in ".fifo" is consumed by message group: SQS
// hands out a group's messages in order and none while one of the group
// is in flight, but may hand several of one group in one receive. Each
// group in hand is handled by a goroutine of its own, one message at a
// time, in order, on the same engine (broker.Processor.ProcessUntil per
// message, as broker/kafka's partitions and broker/servicebus's sessions
// are), at most Options.Concurrency groups at once; the messages waiting
// behind their group's current one are kept in flight. A retry never
// makes the message visible, which would let SQS hand the group on
// after it: it is tried again in place after its back-off, kept in
// flight, and the in-place retries count toward MaxDeliveries. At
// shutdown a group's messages not started are made visible again (in
// order, to the next consumer), unless one of them is on its last
// delivery: then the group is handled on, until ShutdownTimeout. The dead
// letters of a FIFO queue go to a FIFO dead-letter queue, in the
// original's group.
//
// On the producer side Send sets MessageDeduplicationId to
// idem.DedupID(id, fingerprint): within SQS's five-minute deduplication
// interval a producer's retry of the same content is dropped by SQS, but
// an id reused with other content gets another deduplication id, so SQS
// never drops it unseen: the consumer's guard dead-letters it as a
// conflict. SQS's deduplication is a complement, never the guard's
// replacement: its window is five minutes, and standard queues have
// none. Replay sends a dead letter back with a deduplication id of its own
// (the dead letter's MessageId), so the five minutes that remember the
// original's never swallow a replay.
package sqsidem
