// Package idem makes message consumers, HTTP endpoints, webhooks and scheduled
// jobs idempotent: processing the same logical message twice has the effect of
// processing it once.
//
// Brokers deliver at least once. idem turns that into "effectively once" by
// recording each processed key in a durable [Store], atomically with the work
// where it can (the transactional inbox, [DoTx]) and with a leased, fenced
// two-phase record where it cannot ([Guard.Do]).
//
// The flow for every message:
//
//  1. Extract a stable key (a [KeyFunc]) and scope it by consumer identity:
//     the stored key is (scope, id), so subscribers never block each other.
//  2. Claim the key in one atomic store operation.
//  3. Acquired: run the handler, then complete the record with its result.
//     Duplicate: skip the handler and return the recorded result.
//     In progress elsewhere: [ErrInProgress], retry later.
//     Same key, other content: [ErrConflict], dead-letter it.
//     Stale in-progress (the owner crashed, perhaps after its side
//     effect): reconciled with [Options.Reconcile] when given, else
//     parked for an operator ([ErrStale]); retaken (the handler run
//     again) only with [StaleRetake], as [Options.Stale] says.
//  4. A handler error releases the claim so a redelivery retries it; an error
//     wrapped with [Permanent] is reported for dead-lettering.
//
// [Decide] maps the outcome of a call to the broker action (ack, retry,
// dead-letter) so that broker integrations agree on it. Errors carry one
// class on every store and in both modes: data a store cannot take (a batch
// repeating a key, [ErrDuplicateKeyInBatch]; a result over a store's
// limit, or over [Options.MaxResultSize] in [DoTx]) is an [InvalidDataError],
// permanent, dead-lettered with reason invalid_data.
//
// This package imports the standard library only. Stores, brokers, HTTP and
// OpenTelemetry live in leaf packages that import it.
package idem
