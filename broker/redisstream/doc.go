// Package redisstream consumes a Redis stream through a consumer group on
// idem's consumer engine (broker.Consumer): each entry is handled once,
// however often it is delivered, under a guard on any idem store.
//
//	g, err := redisstream.NewGuard(store, "orders", "billing", idem.Options{}) // scope: "orders/billing"
//	c, err := redisstream.NewConsumer(rdb, g, redisstream.Handle(fn), redisstream.Options{
//		Stream: "orders", Group: "billing", Consumer: hostname, DeadLetterStream: "orders.dlq",
//	})
//	err = c.Run(ctx)
//
// or redisstream.Consume(ctx, rdb, g, h, opts) in one call. It has the
// shape of every idem broker adapter (see package
// github.com/idemgo/idem/broker): NewGuard (scope: the stream and the
// group), Handle (two-phase) or HandleTx (the store's transaction with the
// dedup marker), NewConsumer and Run or Consume, MessageOf, DeadLetterOf
// and Replay for dead letters, and Publish on the producer side: an XADD
// with the key in the Idem-Id field. Redis Streams has no duplicate
// detection of its own, so Publish sets no dedup id: a producer's retry is
// another entry, and the consumer's record makes it a duplicate.
//
// How the engine's steps map onto the stream:
//
//   - Receive is XREADGROUP (new entries, ">"), after XAUTOCLAIM of entries
//     idle for Options.MinIdle: those of a consumer that died, and those
//     handed back for a retry. Run creates the group at the stream's start
//     ("0") when it does not exist.
//   - The key is the entry's Idem-Id field (MessageOf), never the entry id:
//     a producer's retry is another entry with the same Idem-Id.
//   - Ack is XACK, after the record is durable.
//   - The delivery count is the group's (XPENDING), so MaxDeliveries
//     (handler failures counted in the record in two-phase mode, deliveries
//     in the inbox) dead-letters with reason max_deliver. Redis itself has
//     no delivery limit and drops nothing: an entry stays pending until
//     acked.
//   - Retry leaves the entry pending and sets its idle time (XCLAIM IDLE
//     JUSTID) so that it becomes claimable once the back-off has passed;
//     the XAUTOCLAIM that takes it, by this consumer or another of the
//     group, counts the new delivery. A retry is thus late by at most
//     Options.Block.
//   - While an entry is handled, or held (its key in progress elsewhere, the
//     store unreachable), its idle time is reset every MinIdle/3 (XCLAIM
//     JUSTID, counting no delivery) so no other consumer claims it; if one
//     has meanwhile, the handler's context is cancelled (broker.ErrLockLost)
//     and nothing is settled.
//   - A dead letter is XADDed to Options.DeadLetterStream, with the entry's
//     fields, idem's headers (broker.DeadLetterHeaders) and its position
//     (Idem-Original-Stream, Idem-Original-Position: the entry id), and the
//     original is XACKed, in one MULTI. Replay puts a dead letter back on
//     its stream (without idem's fields) and deletes it, in one MULTI.
//
// Keep MinIdle above the longest pause a live consumer may have between
// keep-alives (a GC pause, a slow network), or its entries are claimed by
// another consumer while it works; the record then keeps the effect once.
//
// The guide: https://github.com/idemgo/idem/blob/main/docs/brokers/redisstream.md
package redisstream
